// Loaded by evcxr at start-up in the course kernel (EVCXR_CONFIG_DIR/prelude.rs). The
// helpers live in the coursekit_prelude crate (compiled once); only the macros, which must
// be defined in the cell's own crate, are here.
use coursekit_prelude::{catch_panic, display_html, display_png, display_svg, share};

// Panics reach the kernel before evcxr says the cell is done (the kernel runs this again
// after evcxr restarted the process that runs the cells).
coursekit_prelude::install_panic_hook();

// evcxr reports an error that `?` returned from a cell with generated code:
// `eprintln!("{}", error);` then `println!("{}", evcxr_internal_runtime::USER_ERROR_OCCURRED);`,
// a line only evcxr's code prints. That second line marks the last `eprintln!` line as the
// cell's error; a learner's own `eprintln!("{}", error)` stays plain stderr.
#[allow(unused_macros)]
macro_rules! println {
    ("{}", evcxr_internal_runtime::USER_ERROR_OCCURRED) => {{
        coursekit_prelude::returned_error();
        ::std::println!("{}", evcxr_internal_runtime::USER_ERROR_OCCURRED)
    }};
    () => { coursekit_prelude::print_text("\n") };
    ($($arg:tt)*) => { coursekit_prelude::print_text(&format!("{}\n", format_args!($($arg)*))) };
}

// print!/println! (above) and eprint!/eprintln! go through the prelude as marker lines, so
// the kernel shows them in the order the cell printed them and waits for the last one.
#[allow(unused_macros)]
macro_rules! print {
    ($($arg:tt)*) => { coursekit_prelude::print_text(&format!($($arg)*)) };
}

// eprint!/eprintln! come out as stderr.
#[allow(unused_macros)]
macro_rules! eprint {
    ($($arg:tt)*) => { coursekit_prelude::emit("stderr", "-", &format!($($arg)*)) };
}
#[allow(unused_macros)]
macro_rules! eprintln {
    () => { coursekit_prelude::eprint_line("") };
    ($($arg:tt)*) => { coursekit_prelude::eprint_line(&format!($($arg)*)) };
}
