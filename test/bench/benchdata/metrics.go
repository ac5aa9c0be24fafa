package benchdata

import "strings"

// The sub-benchmark keys: BenchmarkReMark/components=1000 and so on.
const (
	// ComponentsKey is the number of Components a sub-benchmark works on.
	ComponentsKey = "components"
	// AgentsKey is the number of agents a sub-benchmark runs.
	AgentsKey = "agents"
)

// BenchmarkReMark (controller/remark_bench_test.go) re-marks n Components
// after a fence transition, beside a bare client that makes the same
// status server-side applies with the same concurrency, in the same run.
const (
	ReMark = "BenchmarkReMark"
	// ReMarkRate is the controller's Components re-marked per second.
	ReMarkRate = "objects/s"
	// ReMarkBareRate is the bare client's Components written per second:
	// the floor the controller is compared with.
	ReMarkBareRate = "bare-objects/s"
	// ReMarkRatio is ReMarkRate / ReMarkBareRate.
	ReMarkRatio = "ratio"
	// ReMarkSeconds is the controller's time to re-mark every Component,
	// in seconds, from the transition's signal.
	ReMarkSeconds = "s/remark"
)

// BenchmarkCacheMemory (controller/cache_bench_test.go) measures what a
// cache of n Components holds: the live heap once synced, less that of the
// same cache synced over none, per Component; whole Components (what a
// controller-runtime cache holds by default) and as fencegate trims them,
// in the same run.
const (
	CacheMemory = "BenchmarkCacheMemory"
	// CacheBytesWhole is the live heap per cached whole Component, in
	// bytes.
	CacheBytesWhole = "B/component-whole"
	// CacheBytesTrimmed is the live heap per cached trimmed Component, in
	// bytes.
	CacheBytesTrimmed = "B/component-trimmed"
	// CacheBytesSaved is CacheBytesWhole - CacheBytesTrimmed.
	CacheBytesSaved = "B/component-saved"
	// CacheTrimmedRatio is CacheBytesTrimmed / CacheBytesWhole.
	CacheTrimmedRatio = "trimmed/whole"
)

// BenchmarkRunMemory (test/e2e/memory_bench_test.go) measures a real
// `fencegate run` that has marked n Components, over the same process with
// none, after a collection.
const (
	RunMemory = "BenchmarkRunMemory"
	// RunHeapPerComponent is the heap in use the process grew by, per
	// Component, in bytes.
	RunHeapPerComponent = "heap-B/component"
)

// BenchmarkAgents (authority/agents_bench_test.go) runs n agents
// heartbeating against one authority process over an etcd process, then
// two floors on the same etcd and schedule from a bare etcd client: a
// transaction shaped as the authority's, and a lease keep-alive. Latencies
// are in milliseconds: a metric named "<what>-p99-ms" is the p99 of <what>.
const (
	Agents = "BenchmarkAgents"
	// AgentsDeclareP99 is a declaration's p99: the authority's answer to
	// an agent's heartbeat.
	AgentsDeclareP99 = "declare-p99-ms"
	// AgentsDeclareFailures counts the declarations that failed (timed
	// out) and were retried, as an agent retries them.
	AgentsDeclareFailures = "declare-failures"
	// AgentsTxnFloorP99 and AgentsKeepaliveFloorP99 are the floors' p99.
	AgentsTxnFloorP99       = "txn-floor-p99-ms"
	AgentsKeepaliveFloorP99 = "keepalive-floor-p99-ms"
	// AgentsCPUPerHeartbeat is the authority's and etcd's CPU per
	// heartbeat, in µs; AgentsCPUTxnFloor and AgentsCPUKeepaliveFloor are
	// it over each floor's CPU per operation.
	AgentsCPUPerHeartbeat   = "cpu-us/heartbeat"
	AgentsCPUTxnFloor       = "cpu/txn-floor"
	AgentsCPUKeepaliveFloor = "cpu/keepalive-floor"
	// P99MillisSuffix ends every p99 metric in milliseconds.
	P99MillisSuffix = "-p99-ms"
)

// P99Of returns what a "<what>-p99-ms" metric measures, and whether unit is
// one.
func P99Of(unit string) (string, bool) {
	what, ok := strings.CutSuffix(unit, P99MillisSuffix)
	return what, ok && what != ""
}
