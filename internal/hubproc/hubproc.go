// Package hubproc helps run `synapse hub` as a child process (bench load,
// the process tests).
package hubproc

import (
	"bufio"
	"io"
	"strings"
)

// Listening reads a hub's standard output to its end and returns a
// channel closed once the hub has printed its "listening on" banner.
func Listening(stdout io.Reader) <-chan struct{} {
	up := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		seen := false
		for sc.Scan() {
			if !seen && strings.Contains(sc.Text(), "listening on") {
				seen = true
				close(up)
			}
		}
	}()
	return up
}
