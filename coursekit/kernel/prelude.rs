// Loaded by evcxr at start-up in the course kernel (EVCXR_CONFIG_DIR/prelude.rs). The
// helpers live in the coursekit_prelude crate (compiled once); only the macros, which must
// be defined in the cell's own crate, are here.
use coursekit_prelude::{catch_panic, display_html, display_png, display_svg, share};

// Panics reach the kernel before evcxr says the cell is done (the kernel runs this again
// after evcxr restarted the process that runs the cells).
coursekit_prelude::install_panic_hook();

// evcxr reports an error that `?` returned from a cell with `eprintln!("{}", error)` in its
// generated code: that one exact form is marked as the cell's error.
#[allow(unused_macros)]
macro_rules! coursekit_eprint_ident {
    ($f:literal, error, $v:ident) => { coursekit_prelude::emit("error", "-", &format!(concat!($f, "\n"), $v)) };
    ($f:literal, $other:ident, $v:ident) => { coursekit_prelude::emit("stderr", "-", &format!(concat!($f, "\n"), $v)) };
}

// eprint!/eprintln! go through the same ordered channel as println! and come out as stderr.
#[allow(unused_macros)]
macro_rules! eprint {
    ($($arg:tt)*) => { coursekit_prelude::emit("stderr", "-", &format!($($arg)*)) };
}
#[allow(unused_macros)]
macro_rules! eprintln {
    ("{}", $e:ident) => { coursekit_eprint_ident!("{}", $e, $e) };
    ("{:?}", $e:ident) => { coursekit_eprint_ident!("{:?}", $e, $e) };
    ("{:#?}", $e:ident) => { coursekit_eprint_ident!("{:#?}", $e, $e) };
    () => { coursekit_prelude::emit("stderr", "-", "\n") };
    ($($arg:tt)*) => { coursekit_prelude::emit("stderr", "-", &format!("{}\n", format!($($arg)*))) };
}
