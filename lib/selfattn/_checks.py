"""Input validation shared by every public function and module constructor.

Bad input must fail loudly with a message naming the argument, what it got and
what was expected, never broadcast silently or return NaN (see docs/design.md,
"Bad input"). Every check lives here so that the messages read the same
everywhere.
"""

from __future__ import annotations

import math
import numbers

import numpy as np
import torch

__all__: list[str] = []

_HALF = (torch.float16, torch.bfloat16)


def describe(x) -> str:
    """A short description of what a caller passed: a tensor's shape, dtype and device."""
    if isinstance(x, torch.Tensor):
        return f"a tensor of shape {tuple(x.shape)}, dtype {x.dtype}, device {x.device}"
    text = repr(x)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(x).__name__} {text}"


def require_tensor(x, name: str) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {describe(x)}")
    return x


def require_float(x, name: str) -> torch.Tensor:
    require_tensor(x, name)
    if not x.is_floating_point():
        raise TypeError(
            f"{name} must be a floating-point tensor (float16, bfloat16, float32 or float64), "
            f"got dtype {x.dtype}; convert it with {name}.float()"
        )
    return x


def require_float_tensors(**tensors) -> None:
    """:func:`require_float` on each keyword argument, in the order given."""
    for name, t in tensors.items():
        require_float(t, name)


def require_ndim(x: torch.Tensor, name: str, at_least: int, shape_doc: str) -> None:
    if x.dim() < at_least:
        raise ValueError(
            f"{name} must have shape {shape_doc} (at least {at_least} dims), got {tuple(x.shape)}"
        )


def require_int(value, name: str, minimum: int | None = 0, maximum: int | None = None) -> int:
    """An integer size or index (Python or NumPy int, not bool, not float), ``>= minimum``
    (and ``<= maximum`` when given)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        if isinstance(value, torch.Tensor) and value.dim() == 0 and not value.is_floating_point():
            if value.dtype != torch.bool:
                return require_int(int(value), name, minimum, maximum)
        raise TypeError(f"{name} must be an int, got {describe(value)}")
    value = int(value)
    too_small = minimum is not None and value < minimum
    if maximum is not None and (too_small or value > maximum):
        raise ValueError(f"{name} must be between {minimum} and {maximum}, got {value}")
    if too_small:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def require_even(d, name: str = "d") -> int:
    """An even int ``>= 2``: a width whose dimensions come in pairs (sin/cos, rotations)."""
    require_int(d, name, 2)
    if d % 2:
        raise ValueError(
            f"{name} must be even (dimensions come in sin/cos or rotation pairs), got {d}"
        )
    return int(d)


def require_base(base, name: str = "base") -> float:
    """A finite number ``> 1``: the base of sinusoidal and rotary frequencies."""
    if not isinstance(base, (int, float)) or isinstance(base, bool):
        raise TypeError(f"{name} must be a number > 1, got {type(base).__name__} {base!r}")
    if not (base > 1 and math.isfinite(base)):
        raise ValueError(f"{name} must be a number > 1 (and finite), got {base!r}")
    return float(base)


def require_number(
    value,
    name: str,
    *,
    positive: bool = False,
    nonnegative: bool = False,
    finite: bool = True,
    allow_none: bool = False,
):
    """A real number (int or float, not bool, not a string): finite unless ``finite=False``
    (NaN is refused either way), and ``> 0`` with ``positive``, ``>= 0`` with ``nonnegative``.
    """
    if value is None and allow_none:
        return None
    if isinstance(value, torch.Tensor) and value.dim() == 0 and value.is_floating_point():
        value = float(value)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {describe(value)}")
    value = float(value)
    if math.isnan(value) or (finite and not math.isfinite(value)):
        raise ValueError(f"{name} must be a finite number, got {value}")
    if positive and not value > 0:
        raise ValueError(f"{name} must be > 0, got {value}")
    if nonnegative and not value >= 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return value


def require_real(x, name: str):
    """``x`` (a tensor, array, number or nested list) holds no complex values.

    Converting a complex input to a float array keeps the real part only, with at most a
    warning: a silently wrong plot or table. Returns ``x`` unchanged.
    """
    if isinstance(x, torch.Tensor):
        is_complex = x.is_complex()
    else:
        try:
            is_complex = bool(np.iscomplexobj(x))
        except (TypeError, ValueError, RuntimeError):
            is_complex = False
    if is_complex:
        raise TypeError(
            f"{name} must hold real numbers, got complex values ({describe(x)}); pass "
            f"{name}.real or {name}.abs() if that is what you mean"
        )
    return x


def require_bool_mask(mask, name: str = "mask") -> torch.Tensor:
    """A bool tensor in the book's convention (``True`` = may attend)."""
    require_tensor(mask, name)
    if mask.dtype != torch.bool:
        raise TypeError(
            f"{name} must be a bool tensor (True = may attend), got dtype {mask.dtype}"
        )
    return mask


def require_scale(scale, d_k: int) -> float:
    """The scores' scale: a real number, or ``None`` for ``1 / sqrt(d_k)``.

    With ``d_k = 0`` every score is an empty sum, 0, whatever the scale (torch agrees).
    """
    scale = require_number(scale, "scale", allow_none=True)
    if scale is None:
        return 1.0 / math.sqrt(d_k) if d_k > 0 else 1.0
    return scale


def require_token_batch(ids, name: str = "ids") -> torch.Tensor:
    """A batch of token ids: a ``torch.long`` tensor of shape ``(B, n)``."""
    if not isinstance(ids, torch.Tensor) or ids.dtype != torch.long or ids.dim() != 2:
        raise TypeError(f"{name} must be a torch.long tensor of shape (B, n), got {describe(ids)}")
    return ids


def require_device(device) -> torch.device:
    """``device`` (a ``torch.device``, a string such as ``"cpu"`` or ``"cuda:0"``, or ``None``
    for the CPU) as a ``torch.device`` that this machine has."""
    if device is None:
        return torch.device("cpu")
    if not isinstance(device, (torch.device, str)):
        raise TypeError(
            f"device must be a torch.device, a string or None, got {type(device).__name__}"
        )
    try:
        device = torch.device(device)
    except RuntimeError as err:
        raise ValueError(f"device must name a torch device such as 'cpu', got {device!r}") from err
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device is {str(device)!r}, but this machine has no CUDA GPU")
    return device


def require_power_of_two(value, name: str, minimum: int = 1) -> int:
    """An int that is a power of two, ``>= minimum`` (a kernel's block size)."""
    value = require_int(value, name, minimum)
    if value & (value - 1):
        raise ValueError(f"{name} must be a power of two >= {minimum}, got {value}")
    return value


def require_choice(value, name: str, choices: tuple[str, ...]) -> str:
    """One of the strings ``choices`` (a kernel, a layout, a mode)."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {describe(value)}")
    return value


#: Where a causal mask's diagonal sits when ``n != m``: ``"bottom_right"`` (``j <= i + m - n``,
#: decoding; what "causal" means everywhere in the library unless told otherwise: ``mask=
#: "causal"``, ``causal=True``, :func:`~selfattn.masks.causal_mask`) or ``"top_left"`` (query
#: ``i`` sees keys ``j <= i``, SDPA's ``is_causal``). For ``n = m`` the two are one mask.
ALIGNMENTS = ("top_left", "bottom_right")


def require_bool(value, name: str) -> bool:
    """A flag: ``True`` or ``False`` (a NumPy bool or a 0-dim bool tensor too), nothing else.

    A string, a number or ``None`` is a TypeError: ``causal="bottom_right"`` would otherwise
    be silently true (and top-left). A string naming a causal alignment says how to spell
    the call.
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, torch.Tensor) and value.dim() == 0 and value.dtype == torch.bool:
        return bool(value)
    hint = ""
    if isinstance(value, str) and value in ALIGNMENTS:
        hint = f"; for {value} causal attention write {name}=True, alignment={value!r}"
    raise TypeError(f"{name} must be True or False, got {describe(value)}{hint}")


def require_dim_arg(dim, name: str = "dim") -> int:
    """A dimension index: an int (``None`` would mean "all elements", never what is meant)."""
    if isinstance(dim, bool) or not isinstance(dim, numbers.Integral):
        raise TypeError(
            f"{name} must be an int naming one dimension (e.g. -1), got {describe(dim)}"
        )
    return int(dim)


def require_same_device(**tensors: torch.Tensor | None) -> None:
    """All given tensors on one device (meta included: it holds no values to compute with)."""
    present = {k: t for k, t in tensors.items() if t is not None}
    devices = {t.device for t in present.values()}
    if len(devices) > 1:
        where = ", ".join(f"{k} on {t.device}" for k, t in present.items())
        raise ValueError(f"{', '.join(present)} must be on one device, got {where}")
    for k, t in present.items():
        if t.device.type == "meta":
            raise ValueError(
                f"{k} is on the meta device (shape only, no values); attention needs real data"
            )


def is_half(x: torch.Tensor) -> bool:
    """float16 or bfloat16: such inputs are computed with float32 scores and softmax."""
    return x.dtype in _HALF


def require_qkv(q, k, v) -> tuple[int, ...]:
    """Validate q (..., n, d_k), k (..., m, d_k), v (..., m, d_v); return the batch shape."""
    for name, t, doc in (
        ("q", q, "(..., n, d_k)"),
        ("k", k, "(..., m, d_k)"),
        ("v", v, "(..., m, d_v)"),
    ):
        require_float(t, name)
        require_ndim(t, name, 2, doc)
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(
            f"q, k and v must share one dtype, got q {q.dtype}, k {k.dtype}, v {v.dtype}"
        )
    require_same_device(q=q, k=k, v=v)
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q and k must have the same last dimension d_k, got q {tuple(q.shape)} "
            f"(d_k={q.shape[-1]}) and k {tuple(k.shape)} (d_k={k.shape[-1]})"
        )
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"k and v must have the same number of keys m (dim -2), got k {tuple(k.shape)} "
            f"and v {tuple(v.shape)}"
        )
    if q.shape[:-2] == k.shape[:-2] == v.shape[:-2]:
        # The usual case, decided without torch.broadcast_shapes, whose general rule costs
        # tens of microseconds: as much as a small attention call itself.
        return tuple(q.shape[:-2])
    try:
        return tuple(torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2]))
    except RuntimeError:
        raise ValueError(
            f"the batch dimensions of q {tuple(q.shape[:-2])}, k {tuple(k.shape[:-2])} and "
            f"v {tuple(v.shape[:-2])} do not broadcast"
        ) from None


def require_mask(mask, scores_shape: tuple[int, ...], device: torch.device | None = None) -> None:
    """A mask: bool (True = may attend) or float (added to the scores), broadcast to the scores."""
    require_tensor(mask, "mask")
    if mask.dtype != torch.bool and not mask.is_floating_point():
        raise TypeError(
            "mask must be bool (True = may attend) or floating point (added to the scores), "
            f"got dtype {mask.dtype}"
        )
    if device is not None and mask.device != device:
        raise ValueError(
            f"mask must be on the inputs' device {device}, got a mask on {mask.device}"
        )
    try:
        out = tuple(torch.broadcast_shapes(mask.shape, scores_shape))
    except RuntimeError:
        out = None
    if out != tuple(scores_shape):
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} does not broadcast to the scores' shape "
            f"{tuple(scores_shape)} (..., n, m)"
        )


def require_token_ids(ids, name: str, vocab_size: int) -> torch.Tensor:
    """Token ids: an integer tensor whose values lie in ``0 .. vocab_size - 1``."""
    require_tensor(ids, name)
    if ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
        raise TypeError(f"{name} must be an integer (torch.long) tensor, got dtype {ids.dtype}")
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab_size):
        raise ValueError(
            f"{name} must lie in 0..{vocab_size - 1} (the vocabulary size is {vocab_size}), "
            f"got values {int(ids.min())}..{int(ids.max())}"
        )
    return ids


def require_module(obj, name: str = "model"):
    """A ``torch.nn.Module`` (a model or layer)."""
    if not isinstance(obj, torch.nn.Module):
        raise TypeError(f"{name} must be a torch.nn.Module, got {describe(obj)}")
    return obj


def require_dropout(dropout, name: str = "dropout") -> float:
    """A dropout probability in ``[0, 1)``."""
    dropout = require_number(dropout, name)
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"{name} must lie in [0, 1), got {dropout}")
    return dropout
