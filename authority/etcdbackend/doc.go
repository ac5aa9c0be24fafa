// Package etcdbackend connects the fence authority to the etcd that stores
// its fences: an embedded single-node etcd that keeps its data in a local
// directory (the default, for one authority process), or an external etcd
// cluster reached over TLS (for production, where the fence must survive the
// loss of a machine).
package etcdbackend
