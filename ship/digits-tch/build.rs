// Where the shipped binary looks for libtorch's shared libraries: a `lib/` folder next to
// it ($ORIGIN/lib, see ship/measure.py's bundle), then LD_LIBRARY_PATH. torch-sys links
// libtorch without an rpath, so without this (or LD_LIBRARY_PATH) the binary does not start.
fn main() {
    println!("cargo:rustc-link-arg-bins=-Wl,-rpath,$ORIGIN/lib");
}
