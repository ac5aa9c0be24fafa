package engine

import "github.com/prometheus/client_golang/prometheus"

// policyCollector exports the policy status at each scrape: which revision
// is in force and whether the last reload worked, the signals an alert on a
// broken policy needs (a counter of failures cannot tell whether the latest
// reload failed).
type policyCollector struct {
	engine       *Engine
	revision     *prometheus.Desc
	reloadWorked *prometheus.Desc
}

func newPolicyCollector(e *Engine) *policyCollector {
	return &policyCollector{
		engine: e,
		revision: prometheus.NewDesc("fencegate_policy_revision_info",
			"The policy revision in force (a hash of the policies and config), as a label; the value is 1.",
			[]string{"revision"}, nil),
		reloadWorked: prometheus.NewDesc("fencegate_policy_last_reload_successful",
			"1 if the last policy reload put its revision in force (or none was tried since the start), 0 if it failed and the last good revision still serves.",
			nil, nil),
	}
}

func (c *policyCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.revision
	ch <- c.reloadWorked
}

func (c *policyCollector) Collect(ch chan<- prometheus.Metric) {
	status := c.engine.status.Load()
	if status == nil {
		return // New has not loaded the first revision yet
	}
	worked := 1.0
	if r := status.LastReload; r != nil && r.Result == "error" {
		worked = 0
	}
	ch <- prometheus.MustNewConstMetric(c.revision, prometheus.GaugeValue, 1, status.Revision)
	ch <- prometheus.MustNewConstMetric(c.reloadWorked, prometheus.GaugeValue, worked)
}
