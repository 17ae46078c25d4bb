//go:build unix

package panto

/*
#include <poll.h>

// 1 if fd is readable now, without waiting (and without reading it).
static int panto_go_readable(int fd) {
	struct pollfd p = { .fd = fd, .events = POLLIN };
	return poll(&p, 1, 0) > 0;
}
*/
import "C"

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

// readable reports whether the descriptor is readable now, without reading it (the
// library's state of it must not change).
func readable(fd uintptr) bool {
	calls <- struct{}{}
	r := C.panto_go_readable(C.int(fd)) != 0
	<-calls
	return r
}
