//! Helpers of the course's `rust-pytorch` kernel, compiled once as a dependency of every
//! cell (see `coursekit/prelude.rs`, which imports them). Output helpers travel as single
//! marker lines on stdout, so the kernel turns them into Jupyter messages in the order the
//! cell produced them.

use std::io::Write;

/// Print one marker line `\x1ecoursekit KIND ARG BODY` (BODY escaped onto one line).
#[doc(hidden)]
pub fn emit(kind: &str, arg: &str, body: &str) {
    let body = escape(body);
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "\u{1e}coursekit {kind} {arg} {body}");
    let _ = out.flush();
}

fn escape(body: &str) -> String {
    body.replace('\\', "\\\\").replace('\n', "\\n").replace('\r', "\\r")
}

/// Make `value` available to `%%python` cells as `rust.<name>` (or `rust["name"]`).
pub fn share<T: std::fmt::Debug + ?Sized>(name: &str, value: &T) {
    emit("share", name, &format!("{value:?}"));
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
        let name = thread.name().unwrap_or("<unnamed>");
        let payload = info.payload();
        let msg = match (payload.downcast_ref::<&str>(), payload.downcast_ref::<String>()) {
            (Some(s), _) => s.to_string(),
            (_, Some(s)) => s.clone(),
            _ => "Box<dyn Any>".to_string(),
        };
        let at = info.location().map(|l| format!(" at {l}")).unwrap_or_default();
        let text = format!("thread '{name}' panicked{at}:\n{msg}\n");
        let body = escape(&text);
        let mut out = std::io::stdout().lock();
        let _ = write!(out, "EVCXR_BEGIN_CONTENT {PANIC_MIME}\n{body}\nEVCXR_END_CONTENT\n");
        let _ = out.flush();
    }));
}

/// Run `f`; if it panics, return the panic's message instead of printing it (for tests
/// that check a function panics).
pub fn catch_panic<R>(f: impl FnOnce() -> R) -> Option<String> {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    std::panic::set_hook(hook);
    let payload = result.err()?;
    let text = payload.downcast_ref::<String>().cloned();
    Some(text.or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default())
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
