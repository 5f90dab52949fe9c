//! The digits MLP of Part 4 with the weights PyTorch trained, in tch: the same program as
//! digits-candle, on libtorch (which must be found at run time: see bench/shipping.md).
//!
//!     digits-tch --weights digits.safetensors --csv images.csv

use std::collections::HashMap;
use std::path::Path;

use digits_io::{Request, FEATURES};
use tch::{Kind, Tensor};

/// One tensor of the weights file, checked against the shape the model needs, as f32.
fn take(file: &Path, tensors: &HashMap<String, Tensor>, name: &str) -> Result<Tensor, String> {
    let t = digits_io::tensor(file, tensors, name, |t| {
        t.size().iter().map(|&d| d as usize).collect()
    })?;
    Ok(t.to_kind(Kind::Float))
}

fn classify(req: &Request) -> Result<Vec<i64>, String> {
    let file = req.weights.as_path();
    // PyTorch's `safetensors.torch.save_file(model.state_dict(), path)`, read back by name.
    let tensors: HashMap<String, Tensor> = Tensor::read_safetensors(file)
        .map_err(|e| {
            format!(
                "cannot load weights file {:?}: {e}",
                file.display().to_string()
            )
        })?
        .into_iter()
        .collect();
    let (w1, b1) = (
        take(file, &tensors, "0.weight")?,
        take(file, &tensors, "0.bias")?,
    );
    let (w2, b2) = (
        take(file, &tensors, "2.weight")?,
        take(file, &tensors, "2.bias")?,
    );
    let x = Tensor::from_slice(&req.inputs).view([req.rows as i64, FEATURES as i64]);
    // F.linear(x, w, b) = x @ w.T + b, as nn.Linear computes it.
    let logits = tch::no_grad(|| x.linear(&w1, Some(&b1)).relu().linear(&w2, Some(&b2)));
    Vec::<i64>::try_from(logits.argmax(-1, false)).map_err(|e| e.to_string())
}

fn main() {
    let req = digits_io::request();
    let classes = classify(&req).unwrap_or_else(|e| digits_io::fail(e));
    digits_io::print_classes(&classes);
}
