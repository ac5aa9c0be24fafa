// Command pause is the test node's sandbox ("pause") image, which holds each
// pod's namespaces, and the first process of the node's own namespaces. It
// reaps the children it inherits and exits on SIGTERM or SIGINT: as the
// node's first process, its exit ends every process of the node.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			return
		}
		// One SIGCHLD may stand for several exited children.
		for {
			var status syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
