package cli

import "net"

// DefaultAuthorityAddress is where fencegate-authority listens by default,
// and so where fencegate's commands look for it.
const DefaultAuthorityAddress = "127.0.0.1:7443"

// IsLoopback reports whether a host:port address stays on this machine:
// "localhost" or a loopback IP. An empty host listens on every interface.
func IsLoopback(address string) bool {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
