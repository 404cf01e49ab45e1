"""Device constants per card (``tileflip.plan.device``): a committed file per measured card, the H200's
with one warning for a card without one."""

import warnings

import pytest

from tileflip.plan import device


@pytest.mark.parametrize(
    "name, card",
    [("NVIDIA H200", "h200"), ("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA H100 PCIe", "h100"),
     ("NVIDIA A100-SXM4-80GB", "a100"), ("NVIDIA B200", "b200"), ("NVIDIA GeForce RTX 4090", "geforce-rtx-4090")],
)  # fmt: skip
def test_card_of(name, card):
    assert device.card_of(name) == card


@pytest.mark.parametrize("card", ["h100", "h200"])
def test_measured_cards_load_their_own_file(card):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        constants, measured = device.constants(card)
    assert measured == card
    assert device.card_of(constants["device"]) == card
    for key in ("sm_count", "sm_clock_hz", "copy_bandwidth_bytes_per_s", "launch_overhead_s",
                "l2_write_sectors_per_s"):  # fmt: skip
        assert constants[key] > 0, key


def test_unmeasured_card_warns_once_and_names_the_command():
    device._constants.cache_clear()
    with pytest.warns(UserWarning, match="tileflip bench --suite device --constants src/tileflip/data/x999.json"):
        constants, measured = device.constants("x999")
    assert measured == device.DEFAULT_CARD and constants == device.load_device()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert device.constants("x999")[1] == device.DEFAULT_CARD  # no second warning


def test_bad_device_file(tmp_path):
    bad = tmp_path / "d.json"
    bad.write_text("[1, 2]")
    with pytest.raises(ValueError, match="must hold a JSON object"):
        device.load_device(bad)
    bad.write_text("{")
    with pytest.raises(ValueError, match="is not JSON"):
        device.load_device(bad)
