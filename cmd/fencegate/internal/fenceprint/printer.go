package fenceprint

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/utils/clock"

	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
)

// The output formats.
const (
	Table = "table"
	JSON  = "json"
)

// Printer writes the fence commands' answers in one format.
type Printer interface {
	// Note writes a sentence about what a command did, before the fence
	// it answers with; the JSON format leaves it out.
	Note(format string, args ...any) error
	// Fence writes a fence.
	Fence(f *fencev1.Fence) error
	// Event writes one event of a watch, as a line of its own.
	Event(ev *fencev1.WatchFenceResponse) error
	// History writes the history events of domain, oldest first.
	History(domain string, events []*fencev1.FenceHistoryEvent) error
}

// New returns the Printer of format (Table or JSON) writing to out, with
// times relative to clk's now.
func New(format string, out io.Writer, clk clock.PassiveClock) (Printer, error) {
	switch format {
	case Table:
		return tablePrinter{out: out, clock: clk}, nil
	case JSON:
		return jsonPrinter{out: out, clock: clk}, nil
	}
	return nil, fmt.Errorf("--output %q: want %s or %s", format, Table, JSON)
}

type jsonPrinter struct {
	out   io.Writer
	clock clock.PassiveClock
}

func (jsonPrinter) Note(string, ...any) error { return nil }

func (p jsonPrinter) Fence(f *fencev1.Fence) error { return p.indented(viewFence(f, p.clock)) }

// Event writes one compact line, so that a script reads one event a line.
func (p jsonPrinter) Event(ev *fencev1.WatchFenceResponse) error {
	return json.NewEncoder(p.out).Encode(viewEvent(ev, p.clock))
}

func (p jsonPrinter) History(_ string, events []*fencev1.FenceHistoryEvent) error {
	views := make([]HistoryView, 0, len(events))
	for _, ev := range events {
		views = append(views, viewHistory(ev))
	}
	return p.indented(views)
}

func (p jsonPrinter) indented(v any) error {
	enc := json.NewEncoder(p.out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

type tablePrinter struct {
	out   io.Writer
	clock clock.PassiveClock
}

func (p tablePrinter) Note(format string, args ...any) error {
	_, err := fmt.Fprintf(p.out, format+"\n\n", args...)
	return err
}

func (p tablePrinter) Fence(f *fencev1.Fence) error {
	v := viewFence(f, p.clock)
	now := p.clock.Now()
	err := p.table(func(w *lines) {
		w.printf("Domain:\t%s\n", v.Domain)
		if h := v.Holder; h != nil {
			w.printf("Holder:\t%s (uid %s) at epoch %d, token %d\n", h.ClusterName, h.ClusterUID, h.Epoch, h.Token)
			w.printf("Acquired:\t%s (%s ago)\n", Timestamp(h.AcquireTime), duration.HumanDuration(now.Sub(h.AcquireTime)))
			w.printf("Lease:\t%s\n", leaseText(h.Released, h.LeaseExpireTime, now, "every instance of the holder"))
			if h.Revoked {
				w.printf("Revoked:\tevery lease of %s, at epoch %d: none is renewed until %s declares a higher epoch\n", h.ClusterName, h.RevokedEpoch, h.ClusterName)
			}
		} else {
			w.printf("Holder:\tnone: no cluster declared in this domain yet\n")
		}
		if pv := v.Pending; pv != nil {
			w.printf("Pending:\t%s (uid %s) at epoch %d, waiting since %s (%s ago)\n", pv.ClusterName, pv.ClusterUID, pv.Epoch,
				Timestamp(pv.RequestTime), duration.HumanDuration(now.Sub(pv.RequestTime)))
		} else {
			w.printf("Pending:\tnone\n")
		}
		w.printf("Lease TTL:\t%s\n", time.Duration(v.LeaseTTLSeconds*float64(time.Second)))
	})
	if err != nil {
		return err
	}
	if h := v.Holder; h != nil && len(h.Instances) > 0 {
		err := p.table(func(w *lines) {
			w.printf("\nINSTANCE\tEPOCH\tLEASE\n")
			for _, l := range h.Instances {
				lease := leaseText(l.Released, l.LeaseExpireTime, now, "the instance")
				if l.Revoked {
					lease = "revoked, not renewed; " + lease
				}
				w.printf("%s\t%d\t%s\n", InstanceName(l.Instance), l.Epoch, lease)
			}
		})
		if err != nil {
			return err
		}
	}
	if len(v.Clusters) == 0 {
		return nil
	}
	return p.table(func(w *lines) {
		w.printf("\nCLUSTER\tUID\tHIGHEST EPOCH\tLAST EPOCH\tLAST DECLARATION\tAGE\n")
		for _, c := range v.Clusters {
			w.printf("%s\t%s\t%d\t%d\t%s\t%s\n", c.ClusterName, c.ClusterUID, c.HighestEpoch, c.LastEpoch,
				Timestamp(c.LastDeclareTime), duration.HumanDuration(now.Sub(c.LastDeclareTime)))
		}
	})
}

func (p tablePrinter) Event(ev *fencev1.WatchFenceResponse) error {
	v := viewEvent(ev, p.clock)
	holder, pending := "none", "none"
	if h := v.Fence.Holder; h != nil {
		holder = fmt.Sprintf("%s@%d token %d", h.ClusterName, h.Epoch, h.Token)
		if h.Released {
			holder += " (released)"
		}
	}
	if pv := v.Fence.Pending; pv != nil {
		pending = fmt.Sprintf("%s@%d", pv.ClusterName, pv.Epoch)
	}
	by := ""
	if v.Actor != nil {
		by = "  by " + v.Actor.text()
	}
	_, err := fmt.Fprintf(p.out, "%s  %-15s  holder %s  pending %s%s\n", Timestamp(v.Time), v.Type, holder, pending, by)
	return err
}

func (p tablePrinter) History(domain string, events []*fencev1.FenceHistoryEvent) error {
	if len(events) == 0 {
		_, err := fmt.Fprintf(p.out, "No history recorded in domain %s.\n", domain)
		return err
	}
	return p.table(func(w *lines) {
		w.printf("TIME\tEVENT\tCLUSTER\tEPOCH\tDETAIL\tBY\n")
		for _, ev := range events {
			v := viewHistory(ev)
			w.printf("%s\t%s\t%s\t%d\t%s\t%s\n", v.Time.UTC().Format(time.RFC3339Nano), v.Type, v.ClusterName, v.Epoch, v.detail(), v.Actor.text())
		}
	})
}

// table writes the lines that rows prints as one table: its own tabwriter
// aligns its columns, independently of the tables around it.
func (p tablePrinter) table(rows func(w *lines)) error {
	tw := tabwriter.NewWriter(p.out, 0, 4, 2, ' ', 0)
	w := &lines{w: tw}
	rows(w)
	if w.err != nil {
		return w.err
	}
	return tw.Flush()
}

// lines writes formatted text and keeps the first error, so a long run of
// lines needs one check.
type lines struct {
	w   io.Writer
	err error
}

func (l *lines) printf(format string, args ...any) {
	if l.err == nil {
		_, l.err = fmt.Fprintf(l.w, format, args...)
	}
}

// leaseText says where a lease stands at now.
func leaseText(released bool, end, now time.Time, releasedBy string) string {
	left := end.Sub(now)
	switch {
	case released:
		return "released by " + releasedBy
	case left > 0:
		return fmt.Sprintf("ends in %s, at %s", left.Round(100*time.Millisecond), Timestamp(end))
	default:
		return fmt.Sprintf("ended %s ago, at %s, without renewal", (-left).Round(100*time.Millisecond), Timestamp(end))
	}
}
