//! What the digits classifiers share, whatever the framework: the command line, the input
//! rows (command-line arguments or a CSV file), the shape of the model's weights, and how
//! an error ends the program (a message on stderr and a non-zero exit status).

use std::collections::HashMap;
use std::fmt::Display;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::exit;

/// Pixels per image (8x8) and classes (the digits 0-9).
pub const FEATURES: usize = 64;
pub const CLASSES: usize = 10;

/// The tensors a weights file must hold, with their shapes: the `state_dict` of PyTorch's
/// `nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))` (the ReLU, index 1, has
/// no parameters).
pub const TENSORS: [(&str, &[usize]); 4] = [
    ("0.weight", &[64, FEATURES]),
    ("0.bias", &[64]),
    ("2.weight", &[CLASSES, 64]),
    ("2.bias", &[CLASSES]),
];

const USAGE: &str = "\
usage: PROG --weights FILE.safetensors [--csv FILE|-] [--scale S] [ROW ...]

Classifies 8x8 images of digits with the MLP of the course's Part 4 (PyTorch's
nn.Sequential(Linear(64, 64), ReLU(), Linear(64, 10)), weights saved with
safetensors.torch.save_file(model.state_dict(), FILE)). Prints one class per line,
in the order of the inputs.

  --weights FILE   the safetensors file (tensors 0.weight, 0.bias, 2.weight, 2.bias)
  ROW              one image: 64 comma-separated numbers, row by row
  --csv FILE       one image per line, 64 comma-separated numbers ('-': standard input)
  --scale S        divide every number by S first (16 for load_digits' raw 0-16 pixels;
                   the model was trained on pixels / 16)
";

/// A parsed command line: the weights file and the images, `rows` rows of `FEATURES`.
pub struct Request {
    pub weights: PathBuf,
    pub inputs: Vec<f32>,
    pub rows: usize,
}

fn prog() -> String {
    std::env::args()
        .next()
        .and_then(|p| {
            PathBuf::from(p)
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| "digits".into())
}

/// Print `PROG: error: msg` on stderr and exit with status 1.
pub fn fail(msg: impl Display) -> ! {
    eprintln!("{}: error: {msg}", prog());
    exit(1)
}

/// A command-line mistake: the message and the usage line, exit status 2.
fn usage_error(msg: impl Display) -> ! {
    let usage = USAGE
        .lines()
        .next()
        .unwrap_or_default()
        .replace("PROG", &prog());
    eprintln!("{}: error: {msg}\n{usage}\n(--help for more)", prog());
    exit(2)
}

/// One image from "v1,v2,...,v64" (`what` names it in errors).
fn parse_row(text: &str, what: &str) -> Result<Vec<f32>, String> {
    let row = text
        .split(',')
        .map(|v| {
            v.trim()
                .parse::<f32>()
                .map_err(|e| format!("{what}: {v:?} is not a number ({e})"))
        })
        .collect::<Result<Vec<f32>, String>>()?;
    if row.len() != FEATURES {
        return Err(format!(
            "{what}: {} numbers, expected {FEATURES} (8x8 pixels)",
            row.len()
        ));
    }
    Ok(row)
}

/// The images of a CSV file (no header; blank lines are skipped).
fn read_csv(path: &str) -> Result<Vec<Vec<f32>>, String> {
    let mut text = String::new();
    if path == "-" {
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| format!("cannot read standard input: {e}"))?;
    } else {
        text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read input file {path:?}: {e}"))?;
    }
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(i, line)| parse_row(line, &format!("{path}, line {}", i + 1)))
        .collect()
}

/// The command line of the program, or exit with a message.
pub fn request() -> Request {
    let mut weights = None;
    let mut scale = 1f32;
    let mut rows: Vec<Vec<f32>> = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |flag: &str| {
            args.next()
                .unwrap_or_else(|| usage_error(format!("{flag} needs a value")))
        };
        match arg.as_str() {
            "-h" | "--help" => {
                print!("{}", USAGE.replace("PROG", &prog()));
                exit(0)
            }
            "--weights" => weights = Some(PathBuf::from(value("--weights"))),
            "--csv" => rows.extend(read_csv(&value("--csv")).unwrap_or_else(|e| fail(e))),
            "--scale" => {
                let v = value("--scale");
                scale = match v.parse::<f32>() {
                    Ok(s) if s > 0.0 && s.is_finite() => s,
                    _ => usage_error(format!("--scale {v:?}: expected a positive number")),
                }
            }
            flag if flag.starts_with("--") => usage_error(format!("unknown option {flag}")),
            row => rows.push(
                parse_row(row, &format!("argument {row:?}")).unwrap_or_else(|e| usage_error(e)),
            ),
        }
    }
    let weights = weights.unwrap_or_else(|| usage_error("--weights FILE is required"));
    if rows.is_empty() {
        usage_error("no input: give ROWs or --csv FILE");
    }
    let n = rows.len();
    let inputs = rows.into_iter().flatten().map(|v| v / scale).collect();
    Request {
        weights,
        inputs,
        rows: n,
    }
}

/// The tensor `name` of a weights file read into `tensors`, checked against the shape the
/// model needs (`shape_of` gives a tensor's shape in the framework at hand): an error names
/// the file, and what it has when the tensor is missing.
pub fn tensor<'a, T>(
    file: &Path,
    tensors: &'a HashMap<String, T>,
    name: &str,
    shape_of: impl Fn(&T) -> Vec<usize>,
) -> Result<&'a T, String> {
    let t = tensors
        .get(name)
        .ok_or_else(|| missing_tensor(file, name, tensors.keys().cloned().collect()))?;
    let expected = TENSORS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, s)| *s)
        .unwrap_or(&[]);
    let shape = shape_of(t);
    if shape != expected {
        return Err(format!(
            "weights file {:?}: tensor {name} has shape {shape:?}, expected {expected:?}",
            file.display().to_string()
        ));
    }
    Ok(t)
}

/// The error for a tensor the weights file lacks: which one, and what the file has.
fn missing_tensor(file: &Path, name: &str, mut have: Vec<String>) -> String {
    have.sort();
    let want: Vec<&str> = TENSORS.iter().map(|(n, _)| *n).collect();
    format!(
        "weights file {:?} has no tensor {name:?}; it has [{}], the model needs [{}] \
         (the state_dict of nn.Sequential(Linear(64, 64), ReLU(), Linear(64, 10)))",
        file.display().to_string(),
        have.join(", "),
        want.join(", ")
    )
}

/// Print one class per line (and stop quietly when the reader has gone: `... | head`).
pub fn print_classes<T: Display>(classes: &[T]) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    for c in classes {
        match writeln!(out, "{c}") {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => exit(0),
            Err(e) => fail(format!("cannot write the output: {e}")),
        }
    }
}
