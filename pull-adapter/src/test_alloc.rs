//! The unit tests' allocator: the system's, counting what each thread holds, so a test
//! can tell what a piece of code allocates whatever other tests do meanwhile.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    /// Bytes allocated on this thread and not freed on it (a block freed on another
    /// thread than its own stays counted on its own).
    static HELD: Cell<isize> = const { Cell::new(0) };
}

fn count(delta: isize) {
    // A thread being torn down may allocate after its locals are gone: not counted.
    let _ = HELD.try_with(|h| h.set(h.get() + delta));
}

// SAFETY: every call goes to the system allocator unchanged; counting only touches a
// const-initialised thread-local `Cell`, which never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size() as isize);
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(-(layout.size() as isize));
        // SAFETY: forwarded with the caller's pointer and layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size() as isize);
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size as isize - layout.size() as isize);
        // SAFETY: forwarded with the caller's pointer, layout and size.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

/// Bytes this thread has allocated and not freed since it started.
pub(crate) fn held_by_this_thread() -> isize {
    HELD.with(|h| h.get())
}
