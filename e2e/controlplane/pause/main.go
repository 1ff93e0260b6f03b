// The pod sandbox's process: it holds the pod's namespaces open and does nothing
// else. As PID 1 of a pod that shares its process namespace it also reaps orphaned
// children, and it exits at once on SIGTERM or SIGINT: a PID 1 that ignores them
// makes every pod deletion wait for its whole grace period.
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
		if sig == syscall.SIGCHLD {
			reap()
			continue
		}
		os.Exit(0)
	}
}

// reap collects every child that has exited, so none stays a zombie.
func reap() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
