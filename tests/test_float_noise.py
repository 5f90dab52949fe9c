"""Committed outputs compared up to floating-point noise, and nothing more."""

from __future__ import annotations

import pytest

from coursekit.content.float_noise import keep_matching, same_text


@pytest.mark.parametrize(
    "ref, new",
    [
        # seen between an AMD and an Intel machine
        ("max |Burn - PyTorch| = 4.5e-8\n", "max |Burn - PyTorch| = 0.0e0\n"),
        ("momentum, max |Burn - PyTorch| = 2.4e-7", "momentum, max |Burn - PyTorch| = 4.8e-7"),
        ("max |norm - PyTorch's| = 1e-6; loss = 5e-7", "max |norm - PyTorch's| = 2e-6; loss = 3e-7"),
        ("state_dict only: max |DFDX − PyTorch| = 0.12", "state_dict only: max |DFDX − PyTorch| = 0.13"),
        ("[0.56901276, -0.21750031]", "[0.5690128, -0.2175003]"),
        ("loss 0.7016, 3.8e-4", "loss 0.7017, 3.9e-4"),
        ("tensor([[ 0.5690, -0.2175]])", "tensor([[ 0.5691, -0.2175]])"),
        ("ends with a figure 0.12.", "ends with a figure 0.13."),
    ],
)
def test_noise_is_tolerated(ref, new):
    assert same_text(ref, new)


@pytest.mark.parametrize(
    "ref, new",
    [
        ("PyTorch: 431/450 test digits right", "PyTorch: 432/450 test digits right"),  # integers are exact
        ("shape [2, 3, 6]", "shape [2, 6, 3]"),
        ("loss 0.7016", "loss 0.7018"),  # two units in the last place
        ("accuracy 0.9556", "accuracy 0.9578"),
        ("max |Burn - PyTorch| = 3e-4", "max |Burn - PyTorch| = 5e-4"),
        ("loss 1.5", "loss 1.5 1.5"),
        ("fc1.weight changed: false", "fc1.weight changed: true"),
        ("fc1.weight", "fc2.weight"),  # digits in names are text
        ("torch 2.11.0", "torch 2.11.1"),  # versions are text
        ("lr 1.0e-3", "lr 1.0e-2"),
        ("0.0e0", "1.0e-1"),
    ],
)
def test_real_differences_are_not(ref, new):
    assert not same_text(ref, new)


def test_keep_matching_restores_only_what_matches():
    ref = [
        {"output_type": "stream", "name": "stdout", "text": "max diff = 2.4e-7\n"},
        {"output_type": "execute_result", "data": {"text/plain": "loss 0.7016"}, "metadata": {}},
    ]
    new = [
        {"output_type": "stream", "name": "stdout", "text": "max diff = 4.8e-7\n"},
        {"output_type": "execute_result", "data": {"text/plain": "loss 0.9016"}, "metadata": {}},
        {"output_type": "stream", "name": "stderr", "text": "extra"},
    ]
    kept = keep_matching(new, ref)
    assert kept[0] == ref[0]
    assert kept[1]["data"]["text/plain"] == "loss 0.9016"
    assert kept[2] == new[2]
    assert new[0]["text"] == "max diff = 4.8e-7\n"  # the input is not changed
