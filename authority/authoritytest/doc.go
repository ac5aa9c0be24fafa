// Package authoritytest runs a real fence authority for tests: the gRPC
// FenceService on a loopback port, over an embedded etcd in the test's
// temporary directory, stopped when the test ends. Tests of fence clients
// (the agent, the command line) use it instead of a fake, so they exercise
// the real protocol, leases and watch.
package authoritytest
