//go:build unix

package panto

import (
	"os"
	"syscall"
)

// pollable returns an *os.File on a close-on-exec dup of the library's readiness
// descriptor fd (os.NewFile's file closes what it holds, and the descriptor is the C
// stream's), registered with the netpoller since the descriptor is non-blocking; nil if
// the dup fails.
func pollable(fd int64) *os.File {
	syscall.ForkLock.RLock()
	nfd, err := syscall.Dup(int(fd))
	if err == nil {
		syscall.CloseOnExec(nfd)
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return nil
	}
	return os.NewFile(uintptr(nfd), "panto-stream-readiness")
}
