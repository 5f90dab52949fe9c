//! The digits MLP of Part 4 with the weights PyTorch trained, in Candle: a pure-Rust program
//! (no libtorch, no Python) that classifies the images given on its command line.
//!
//!     digits-candle --weights digits.safetensors --csv images.csv

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, Module, Tensor, D};
use candle_nn::Linear;
use digits_io::{Request, FEATURES};

/// One tensor of the weights file, checked against the shape the model needs, as f32.
fn take(file: &Path, tensors: &HashMap<String, Tensor>, name: &str) -> Result<Tensor, String> {
    let t = digits_io::tensor(file, tensors, name, |t| t.dims().to_vec())?;
    t.to_dtype(DType::F32).map_err(|e| e.to_string())
}

fn classify(req: &Request) -> Result<Vec<u32>, String> {
    let dev = Device::Cpu;
    let file = req.weights.as_path();
    // PyTorch's `safetensors.torch.save_file(model.state_dict(), path)`, read back by name.
    let tensors = candle_core::safetensors::load(file, &dev).map_err(|e| {
        format!(
            "cannot load weights file {:?}: {e}",
            file.display().to_string()
        )
    })?;
    // nn.Linear stores its weight as (out, in), and so does candle_nn::Linear.
    let fc1 = Linear::new(
        take(file, &tensors, "0.weight")?,
        Some(take(file, &tensors, "0.bias")?),
    );
    let fc2 = Linear::new(
        take(file, &tensors, "2.weight")?,
        Some(take(file, &tensors, "2.bias")?),
    );
    let run = || -> candle_core::Result<Vec<u32>> {
        let x = Tensor::from_slice(&req.inputs, (req.rows, FEATURES), &dev)?;
        let logits = fc2.forward(&fc1.forward(&x)?.relu()?)?;
        logits.argmax(D::Minus1)?.to_vec1::<u32>()
    };
    run().map_err(|e| e.to_string())
}

fn main() {
    let req = digits_io::request();
    let classes = classify(&req).unwrap_or_else(|e| digits_io::fail(e));
    digits_io::print_classes(&classes);
}
