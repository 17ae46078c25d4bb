//go:build !unix

package panto

import "os"

// pollable: no descriptor the netpoller can wait on here (streams wait in the library).
func pollable(int64) *os.File { return nil }
