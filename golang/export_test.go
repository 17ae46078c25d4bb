package panto

// setMaxBlockedWaits replaces the bound on goroutines waiting inside the library (no
// stream may be waiting) and returns what restores it.
func setMaxBlockedWaits(n int) func() {
	old := slots.Swap(newWaitSlots(n))
	return func() { slots.Store(old) }
}
