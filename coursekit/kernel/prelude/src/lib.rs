//! Helpers of the course's `rust-pytorch` kernel, compiled once as a dependency of every
//! cell (see `coursekit/prelude.rs`, which imports them). Output helpers travel as single
//! marker lines on stdout, so the kernel turns them into Jupyter messages in the order the
//! cell produced them.

use std::io::Write;

/// Print one marker line `\x1ecoursekit KIND ID ARG BODY` (BODY escaped onto one line),
/// then the line's ID as content (`LAST_MIME`). evcxr relays stdout lines from another
/// thread, so a cell's last lines may reach the kernel after evcxr said the cell is done;
/// content always arrives before that, and a second content of the same MIME type replaces
/// the first: the kernel learns which line is the cell's last and waits for exactly that.
#[doc(hidden)]
pub fn emit(kind: &str, arg: &str, body: &str) {
    let body = escape(body);
    let id = line_id();
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "\u{1e}coursekit {kind} {id:016x} {arg} {body}");
    write_content(&mut out, LAST_MIME, &format!("{id:016x}"));
}

/// The MIME type of the ID of the last marker line a cell printed (see `emit`).
#[doc(hidden)]
pub const LAST_MIME: &str = "application/x-coursekit-last";

/// An ID no other line of the process has. Each cell is its own library with its own
/// copy of this crate (and of std), so no counter is shared between cells: the IDs come
/// from std's randomly keyed hasher, whose keys change with every `RandomState`.
fn line_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u8(0);
    hasher.finish()
}

/// `print!`/`println!`: text on stdout, as a marker line (ordered with the cell's other
/// output, waited for). evcxr's own protocol lines (`EVCXR_…`, which its generated code
/// and `evcxr_display` implementations print) go out as they are.
#[doc(hidden)]
pub fn print_text(text: &str) {
    if text.starts_with("EVCXR_") {
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(text.as_bytes());
        let _ = out.flush();
    } else {
        emit("stdout", "-", text);
    }
}

fn escape(body: &str) -> String {
    body.replace('\\', "\\\\").replace('\n', "\\n").replace('\r', "\\r")
}

/// Make `value` available to `%%python` cells as `rust.<name>` (or `rust["name"]`).
pub fn share<T: std::fmt::Debug + ?Sized>(name: &str, value: &T) {
    // as content, which evcxr collects before it says the cell is done; one MIME type per
    // name, so a second share of a name replaces the first
    let name = name.replace('%', "%25").replace(' ', "%20").replace('\n', "%0A");
    content(&format!("{SHARE_MIME_PREFIX}{name}"), &format!("{value:?}"));
}

/// The MIME type of a shared value is this prefix and the value's name (`%`-escaped).
#[doc(hidden)]
pub const SHARE_MIME_PREFIX: &str = "application/x-coursekit-share+";

/// The MIME type under which the error a cell returned with `?` reaches the kernel.
#[doc(hidden)]
pub const ERROR_MIME: &str = "application/x-coursekit-error";

thread_local! {
    static LAST_STDERR_LINE: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// `eprintln!`: a line on stderr, remembered in case evcxr's code says it was the error
/// the cell returned with `?` (see `returned_error`).
#[doc(hidden)]
pub fn eprint_line(text: &str) {
    emit("stderr", "-", &format!("{text}\n"));
    LAST_STDERR_LINE.with(|l| *l.borrow_mut() = text.to_string());
}

/// Called by evcxr's generated code (through the prelude's `println!`) right after it
/// printed the error a cell returned with `?`: report that line as the cell's error.
#[doc(hidden)]
pub fn returned_error() {
    let text = LAST_STDERR_LINE.with(|l| std::mem::take(&mut *l.borrow_mut()));
    content(ERROR_MIME, &text);
}

/// The MIME type under which a panic's report reaches the kernel.
#[doc(hidden)]
pub const PANIC_MIME: &str = "application/x-coursekit-panic";

/// Report panics as evcxr "content" (which evcxr collects before it says the cell is done)
/// instead of on stderr (which evcxr relays from another thread, so a panic's text could
/// arrive after the cell ended). The kernel shows the text as stderr and fails the cell.
#[doc(hidden)]
pub fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let thread = std::thread::current();
        let at = info.location().map(|l| l.to_string());
        report_panic(thread.name().unwrap_or("<unnamed>"), at.as_deref(), &panic_message(info.payload()));
    }));
}

/// The text a panic's payload carries (a `&str` or a `String` for `panic!` and `assert!`).
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    match (payload.downcast_ref::<&str>(), payload.downcast_ref::<String>()) {
        (Some(s), _) => s.to_string(),
        (_, Some(s)) => s.clone(),
        _ => "Box<dyn Any>".to_string(),
    }
}

/// A panic's report, in Rust's own words, as content the kernel turns into the cell's error.
fn report_panic(thread: &str, location: Option<&str>, msg: &str) {
    let at = location.map(|l| format!(" at {l}")).unwrap_or_default();
    content(PANIC_MIME, &format!("thread '{thread}' panicked{at}:\n{msg}\n"));
}

/// Send `body` as evcxr "content" of the given MIME type: evcxr collects it before it says
/// the cell is done (stdout lines it relays from another thread could come later).
fn content(mime: &str, body: &str) {
    write_content(&mut std::io::stdout().lock(), mime, body);
}

/// Write and flush one evcxr content block on a locked stdout.
fn write_content(out: &mut impl Write, mime: &str, body: &str) {
    let _ = write!(out, "EVCXR_BEGIN_CONTENT {mime}\n{}\nEVCXR_END_CONTENT\n", escape(body));
    let _ = out.flush();
}

/// Run `f`; if it panics, return the panic's message instead of printing it (for tests
/// that check a function panics).
pub fn catch_panic<R>(f: impl FnOnce() -> R) -> Option<String> {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    std::panic::set_hook(hook);
    Some(panic_message(&*result.err()?))
}

/// The f32 values whose bit patterns `hex` holds, 8 hex digits each: how `to_rust` sends
/// an array (exact, and one string token where a `vec![…]` literal of thousands of numbers
/// kept evcxr's analyzer busy for seconds to minutes).
#[doc(hidden)]
pub fn f32s_from_hex(hex: &str) -> Vec<f32> {
    let digits = |c: &[u8]| std::str::from_utf8(c).ok().and_then(|c| u32::from_str_radix(c, 16).ok());
    let bits = hex.as_bytes().chunks(8).map(|c| digits(c).expect("8 hex digits per f32"));
    bits.map(f32::from_bits).collect()
}

/// Show HTML (a table, a styled message) in the cell's output.
pub fn display_html(html: &str) {
    emit("display", "text/html", html);
}

/// Show an SVG picture in the cell's output.
pub fn display_svg(svg: &str) {
    emit("display", "image/svg+xml", svg);
}

/// Show PNG bytes as a picture in the cell's output.
pub fn display_png(png: &[u8]) {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut b64 = String::with_capacity(png.len() * 4 / 3 + 4);
    for chunk in png.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, &b)| n | (b as u32) << (16 - 8 * i));
        for i in 0..4 {
            let c = if i <= chunk.len() { ABC[(n >> (18 - 6 * i) & 63) as usize] as char } else { '=' };
            b64.push(c);
        }
    }
    emit("display", "image/png", &b64);
}

/// The harness of graded and validated runs (coursekit/grading/harness.py wraps each test
/// cell in `grading::test`). A test counts only if the harness saw its closure return
/// `Ok`: the proof is a content message carrying the run's secret nonce, which the grader
/// checks outside the kernel. Panics are caught here with `catch_unwind`, whatever panic
/// hook the code under test installed.
#[doc(hidden)]
pub mod grading {
    use std::cell::{Cell, RefCell};
    use std::fmt::Display;

    /// The MIME type of the harness's proof that a test ran to its end.
    pub const PASS_MIME: &str = "application/x-coursekit-test-passed";

    /// An error a test returned with `?` (anything printable, as in evcxr's own cells).
    pub struct Failure(String);

    impl<E: Display> From<E> for Failure {
        fn from(error: E) -> Self {
            Failure(error.to_string())
        }
    }

    thread_local! {
        static HIDDEN: Cell<bool> = const { Cell::new(false) };
        static LOCATION: RefCell<Option<(u32, u32)>> = const { RefCell::new(None) };
    }

    /// Marks where the hidden part of a test starts.
    pub fn hidden() {
        HIDDEN.with(|h| h.set(true));
    }

    /// Run one test cell's code; report its failure as a panic of the cell, or its success
    /// as the proof the grader looks for. The harness opens on the cell's first line, so
    /// a panic's line, less the line of this call, is its line in the cell.
    #[track_caller]
    pub fn test(nonce: &str, name: &str, f: impl FnOnce() -> Result<(), Failure>) {
        let first_line = std::panic::Location::caller().line();
        HIDDEN.with(|h| h.set(false));
        LOCATION.with(|l| *l.borrow_mut() = None);
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(|info| {
            let at = info.location().map(|l| (l.line(), l.column()));
            LOCATION.with(|l| *l.borrow_mut() = at);
        }));
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        std::panic::set_hook(previous);
        let part = if HIDDEN.with(|h| h.get()) { "hidden test" } else { "test" };
        let failure = match result {
            Ok(Ok(())) => {
                let proof = format!("{{\"nonce\": \"{nonce}\", \"test\": \"{name}\"}}");
                super::content(PASS_MIME, &proof);
                return;
            }
            Ok(Err(Failure(error))) => format!("{part} {name} returned an error: {error}"),
            Err(payload) => {
                let msg = super::panic_message(&*payload);
                match LOCATION.with(|l| *l.borrow()) {
                    Some((line, _)) if line >= first_line => {
                        format!("{part} {name} failed at line {} of its cell: {msg}", line - first_line + 1)
                    }
                    Some(_) => format!("{part} {name} failed (in code it calls): {msg}"),
                    None => format!("{part} {name} failed: {msg}"),
                }
            }
        };
        super::report_panic("main", None, &failure);
    }
}
