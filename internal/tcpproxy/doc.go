// Package tcpproxy is a TCP proxy for tests of network partitions. A Proxy
// forwards the connections it accepts to one target until it is cut: then
// it either drops everything (a black hole: the bytes are lost and the
// connections are dead once the network heals) or stalls everything (the
// bytes are held and delivered, late, once it heals). A cut proxy still
// accepts connections, so clients see what a partition looks like from their
// side, calls that hang until their deadline, never a fast "connection
// refused".
package tcpproxy
