"""The versions a pasted conformance log needs to be reproducible."""

from __future__ import annotations

import platform

import torch

from rtmm_protocol._version import PROTOCOL_VERSION, __version__

__all__ = ["environment_info"]


def environment_info(device: torch.device, *, name_device: bool = False) -> dict[str, str]:
    """Package, protocol, torch, CUDA and Python versions, and the device checked on.

    ``cuda`` is the CUDA version torch was built with. ``name_device`` adds a CUDA
    device's name, which initialises CUDA: only where the checks run may ask.
    """
    device_name = str(device)
    if name_device and device.type == "cuda":
        device_name = f"{device} ({torch.cuda.get_device_name(device)})"
    return {
        "rtmm_protocol": __version__,
        "protocol": PROTOCOL_VERSION,
        "torch": torch.__version__,
        "cuda": torch.version.cuda or "none",
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "device": device_name,
    }
