//! Gives the shared library its soname, `libpanto.so.<ABI major>`, so programs linked
//! against one ABI major never load a library of another.

fn main() {
    let major = std::env::var("CARGO_PKG_VERSION_MAJOR").unwrap_or_else(|_| "0".into());
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if os == "linux" || os == "freebsd" || os == "netbsd" || os == "openbsd" {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libpanto.so.{major}");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
