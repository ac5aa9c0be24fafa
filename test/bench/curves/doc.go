// Package curves draws fencegate's cost curves: how its cost grows with the
// work it is given, each beside the anchors and the floor measured in the
// same run. It reads the standard output of `go test -bench` and the
// side-by-side admission run's JSON (both described by package benchdata),
// and writes one self-contained HTML page of SVG plots, each with a
// caption that says what was measured and on what machine.
//
// The plots:
//   - admission latency (p99) against offered load: fencegate, OPA's
//     server, a controller-runtime webhook that allows everything and the
//     no-decision TLS floor (the side-by-side run, -rates);
//   - re-mark time against Components: the controller and a bare client
//     making the same writes (BenchmarkReMark);
//   - authority p99 against agents (BenchmarkAgents);
//   - the memory Components add against cached Components: the cache's,
//     whole and trimmed (BenchmarkCacheMemory), and a whole fencegate run
//     process's (BenchmarkRunMemory).
//
// A plot whose data is missing is left out, and the page says so.
//
// make bench calls it through test/bench/report:
//
//	cd test/bench && go run ./report -in ../../reports/bench-<stamp>.txt -sidebyside ../../reports/bench-<stamp>.json -o ../../reports/bench-<stamp>.html
package curves
