// Package benchdata is the one home of what fencegate's benchmarks hand to
// the report that plots them: the names of the benchmarks and
// sub-benchmarks, the units of the metrics they report
// (testing.B.ReportMetric), and the side-by-side admission run's
// measurements as JSON.
//
// The Go benchmarks are read from the standard benchmark format that
// `go test -bench` prints; a benchmark's metrics are found by the names
// here, so a benchmark that renames a metric renames it here too. The
// side-by-side run (package sidebyside) writes SideBySide; the report
// (package curves) reads it.
//
// It imports only the standard library, so that the benchmarks' own tests
// can use its names without pulling anything in.
package benchdata
