# Types of the module cffi compiles from the cdef regions of csrc/nnburst.h and
# csrc/qconv.h (csrc/build_ffi.py).  Written by hand: keep it in step with them.
# Only nnburst/_bindings.py imports the module; with these types nothing
# built on it (shm, event_flag, fmq) sees an untyped value.

from collections.abc import Callable, Iterator
from typing import overload

class CData:
    """A C pointer, array or struct that cffi owns."""

    def __getitem__(self, index: int) -> int: ...  # int *, uint32_t *: the pointed-to value
    def __setitem__(self, index: int, value: int) -> None: ...
    def __iter__(self) -> Iterator[CData]: ...  # nnb_region_t[2]: its structs
    def __getattr__(self, field: str) -> int: ...  # nnb_region_t fields are integers
    def __len__(self) -> int: ...
    def __add__(self, offset: int) -> CData: ...  # pointer arithmetic
    def __int__(self) -> int: ...  # a uintptr_t cast's value

class _FFI:
    NULL: CData
    def new(self, cdecl: str, init: object = ...) -> CData: ...
    def cast(self, cdecl: str, value: CData | int) -> CData: ...
    @overload
    def from_buffer(self, python_buffer: object, require_writable: bool = ...) -> CData: ...
    @overload
    def from_buffer(
        self, cdecl: str, python_buffer: object, require_writable: bool = ...
    ) -> CData: ...
    def release(self, cdata: CData) -> None: ...
    def callback(
        self, cdecl: str, python_callable: Callable[..., object] | None = ...
    ) -> CData: ...

class _Lib:
    NNB_FMQ_MAGIC: int
    NNB_FMQ_VERSION: int
    NNB_FMQ_HEADER_OFFSET: int
    NNB_FMQ_READ_OFFSET: int
    NNB_FMQ_WRITE_OFFSET: int
    NNB_FMQ_EVFLAG_OFFSET: int
    NNB_FMQ_RING_OFFSET: int
    NNB_FLAVOR_SYNCHRONIZED: int
    NNB_FLAVOR_UNSYNCHRONIZED: int
    NNB_FMQ_HAS_EVFLAG: int
    NNB_EF_NOT_FULL: int
    NNB_EF_NOT_EMPTY: int
    NNB_EF_TEARDOWN: int
    NNB_EAGAIN: int
    NNB_ETIMEDOUT: int
    NNB_EINTR: int
    NNB_EINVAL: int
    NNB_EPROTO: int
    NNB_EOVERFLOW: int
    NNB_EPIPE: int
    NNB_EBADF: int
    NNB_CONV_BEST: int
    NNB_CONV_PORTABLE: int
    NNB_CONV_AVX2: int
    NNB_CONV_AVX512: int
    NNB_POOL_MAX: int
    NNB_POOL_SUM: int
    NNB_OUT_UINT8: int
    NNB_OUT_INT8: int
    NNB_QUANT_ADD: int
    NNB_QUANT_MUL: int
    def nnb_fmq_handle_bytes(self) -> int: ...
    def nnb_fmq_required_bytes(self, quantum: int, count: int) -> int: ...
    def nnb_fmq_create(
        self,
        q: CData,
        mem: CData,
        mem_bytes: int,
        quantum: int,
        count: int,
        flavor: int,
        flags: int,
    ) -> int: ...
    def nnb_fmq_attach(
        self,
        q: CData,
        mem: CData,
        mem_bytes: int,
        quantum: int,
        count: int,
        flavor: int,
        flags: int,
        reset_pointers: int,
    ) -> int: ...
    def nnb_fmq_available_to_read(self, q: CData) -> int: ...
    def nnb_fmq_available_to_write(self, q: CData) -> int: ...
    def nnb_fmq_write(self, q: CData, src: CData, n: int) -> int: ...
    def nnb_fmq_read(self, q: CData, dst: CData, n: int) -> int: ...
    def nnb_fmq_begin_write(self, q: CData, n: int, regions: CData) -> int: ...
    def nnb_fmq_commit_write(self, q: CData, n: int) -> int: ...
    def nnb_fmq_begin_read(self, q: CData, n: int, regions: CData) -> int: ...
    def nnb_fmq_commit_read(self, q: CData, n: int) -> int: ...
    def nnb_fmq_write_blocking(
        self,
        q: CData,
        src: CData,
        n: int,
        read_notification: int,
        write_notification: int,
        deadline_ns: int,
        spin_ns: int,
    ) -> int: ...
    def nnb_fmq_read_blocking(
        self,
        q: CData,
        dst: CData,
        n: int,
        read_notification: int,
        write_notification: int,
        deadline_ns: int,
        spin_ns: int,
    ) -> int: ...
    def nnb_fmq_read_available_blocking(
        self,
        q: CData,
        dst: CData,
        max_n: int,
        read_notification: int,
        write_notification: int,
        deadline_ns: int,
        spin_ns: int,
    ) -> int: ...
    def nnb_fmq_round_trip(self, rt: CData, n: int, deadline_ns: int, spin_ns: int) -> int: ...
    def nnb_fmq_shutdown(self, q: CData) -> None: ...
    def nnb_fmq_calls_inside(self, q: CData) -> int: ...
    def nnb_fmq_set_read_hook(self, q: CData, hook: CData, ctx: CData) -> None: ...
    def nnb_fmq_evflag_word(self, q: CData) -> CData: ...
    def nnb_evflag_wake(self, word: CData, bits: int) -> int: ...
    def nnb_evflag_wait(
        self, word: CData, bits: int, deadline_ns: int, retry: int, seen: CData
    ) -> int: ...
    def nnb_monotonic_ns(self) -> int: ...
    def nnb_keep_freed_memory(self, mmap_threshold: int, trim_threshold: int) -> int: ...
    # csrc/plan.h
    NNB_PLAN_ADD: int
    NNB_PLAN_SUB: int
    NNB_PLAN_MUL: int
    NNB_PLAN_DIV: int
    NNB_PLAN_MAXIMUM: int
    NNB_PLAN_MINIMUM: int
    NNB_PLAN_CLAMP: int
    NNB_PLAN_HARD_SWISH: int
    def nnb_plan_run(
        self,
        steps: CData,
        count: int,
        arena: CData,
        arena_floats: int,
        tensors: CData,
        tensor_floats: CData,
        tensor_count: int,
    ) -> int: ...
    def nnb_depthwise_conv_f32(
        self,
        in_: CData,
        shape: CData,
        weights: CData,
        weight_c: int,
        bias: CData,
        lo: float,
        hi: float,
        out: CData,
        path: int,
    ) -> int: ...
    def nnb_conv_f32(
        self,
        in_: CData,
        shape: CData,
        weights: CData,
        weight_cols: int,
        bias: CData,
        lo: float,
        hi: float,
        out: CData,
        path: int,
    ) -> int: ...
    def nnb_add_padded_channels_f32(
        self,
        a: CData,
        x: CData,
        pixels: int,
        channels: int,
        x_channels: int,
        lo: float,
        hi: float,
        out: CData,
    ) -> int: ...
    def nnb_pool_f32(self, in_: CData, shape: CData, kind: int, out: CData) -> int: ...
    def nnb_requantize_f32(
        self,
        acc: CData,
        rows: int,
        channels: int,
        bias: CData,
        multipliers: CData,
        shifts: CData,
        per_channel: int,
        zero_point: int,
        lo: int,
        hi: int,
        out_type: int,
        out: CData,
    ) -> int: ...
    def nnb_quant_binary_table(self, params: CData, table: CData) -> int: ...
    def nnb_quant_binary_lookup(
        self, a: CData, count: int, b: CData, b_count: int, table: CData, out: CData
    ) -> int: ...
    def nnb_softmax_quant8(
        self, in_: CData, rows: int, depth: int, exps: CData, radius: int, type: int, out: CData
    ) -> int: ...
    def nnb_quantize_f32(
        self, in_: CData, count: int, scale: float, zero_point: int, out_type: int, out: CData
    ) -> int: ...
    # csrc/qconv.h (its own cdef region)
    NNB_QCONV_UINT8: int
    NNB_QCONV_INT8: int
    NNB_QCONV_BEST: int
    NNB_QCONV_PORTABLE: int
    NNB_QCONV_AVX2: int
    def nnb_qconv_path(self, path: int) -> int: ...
    def nnb_qconv_packed_bytes(self, layer: CData) -> int: ...
    def nnb_qconv_scratch_bytes(self, layer: CData) -> int: ...
    def nnb_qconv_pack(
        self,
        layer: CData,
        weights: CData,
        bias: CData,
        multipliers: CData,
        shifts: CData,
        per_channel: int,
        packed: CData,
        packed_bytes: int,
    ) -> int: ...
    def nnb_qconv_run(
        self,
        layer: CData,
        packed: CData,
        packed_bytes: int,
        in_: CData,
        batches: int,
        out: CData,
        scratch: CData,
        scratch_bytes: int,
        path: int,
    ) -> int: ...
    def nnb_qdwconv_run(
        self,
        layer: CData,
        packed: CData,
        packed_bytes: int,
        in_: CData,
        batches: int,
        out: CData,
        scratch: CData,
        scratch_bytes: int,
        path: int,
    ) -> int: ...
    def nnb_qdwconv_packed_bytes(self, layer: CData) -> int: ...
    def nnb_qdwconv_scratch_bytes(self, layer: CData) -> int: ...
    def nnb_qdwconv_pack(
        self,
        layer: CData,
        weights: CData,
        bias: CData,
        multipliers: CData,
        shifts: CData,
        per_channel: int,
        packed: CData,
        packed_bytes: int,
    ) -> int: ...

ffi: _FFI
lib: _Lib
