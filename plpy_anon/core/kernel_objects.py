"""A kernel module's machine code loaded through llvmlite alone, without importing numba.

:func:`export` (run by :mod:`.mondrian_warm` with numba loaded) writes every compiled signature
of a module's kernels into one object file, ``<module>.kernels`` in the cache directory, beside
what calling it needs: each signature's argument types and symbol. :func:`load` maps that object
into an llvmlite MCJIT engine and calls each kernel through ctypes with numba's native calling
convention (an array is its meminfo, parent, size, item size, data pointer, shape and strides).
A new backend loads them in 0.04-0.05 s of CPU, through numba in 0.16-0.20 s
(``python -m tests.bench kernel_loading``).

:func:`load` returns None (the caller then loads numba) when the file is missing, torn, a
symlink, not this OS user's or writable by another (it or its directory), written for another source of the kernels (its SHA-256), another numba or
llvmlite, or another CPU, or when a symbol it needs is not in the process; a call whose argument
types no exported signature has goes to the numba dispatcher (:class:`Kernel`'s ``fallback``).
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import json
import os
import stat
import struct
from pathlib import Path

import numpy as np

#: the file's first bytes; bumped when the layout of the file or the calling convention changes
MAGIC = b"plpy_anon kernels 1\n"

#: numba's native status codes that mean success: a value in the return slot, or None
_RETURNED = (0, -2)

_CTYPES = {"i64": ctypes.c_int64, "i32": ctypes.c_int32, "i16": ctypes.c_int16,
           "i8": ctypes.c_int8, "i1": ctypes.c_bool, "double": ctypes.c_double,
           "float": ctypes.c_float}


def source_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def type_key(value) -> str | None:
    """The key of ``value``'s numba type (as numba's typeof sees it), or None for a value no
    exported signature can take."""
    if isinstance(value, np.ndarray):
        flags = value.flags
        layout = "C" if flags.c_contiguous else "F" if flags.f_contiguous else "A"
        return f"a{value.dtype.str}:{value.ndim}:{layout}:{'w' if flags.writeable else 'r'}"
    if isinstance(value, (bool, np.bool_)):
        return "b"
    if isinstance(value, int):
        return "i64" if -(1 << 63) <= value < (1 << 63) else None
    if isinstance(value, float):
        return "f64"
    if isinstance(value, np.integer):
        return f"{'i' if value.dtype.kind == 'i' else 'u'}{value.dtype.itemsize * 8}"
    if isinstance(value, np.floating):
        return f"f{value.dtype.itemsize * 8}"
    if isinstance(value, tuple):
        keys = [type_key(v) for v in value]
        return None if None in keys else "(" + ",".join(keys) + ")"
    return None


def _flatten(value, out: list) -> None:
    """``value`` as numba's native arguments, in order, appended to ``out``."""
    if isinstance(value, np.ndarray):
        out += (0, id(value), value.size, value.itemsize, value.ctypes.data)
        out += value.shape
        out += value.strides
    elif isinstance(value, tuple):
        for v in value:
            _flatten(v, out)
    else:
        out.append(value)


class Kernel:
    """One kernel: its exported signatures by the key of their argument types; a call with
    other types goes to ``fallback()`` (the numba dispatcher)."""

    def __init__(self, name, signatures, fallback):
        self.__name__ = name
        self._signatures = signatures          # key -> (ctypes function, return kind)
        self._fallback = fallback
        self.calls = 0
        self.signatures = len(signatures)

    def __call__(self, *args):
        key = ",".join(type_key(a) or "?" for a in args)
        found = self._signatures.get(key)
        if found is None:
            module = self._fallback()
            if module is None:
                raise TypeError(f"plpy_anon: the compiled kernel {self.__name__} has no "
                                f"signature for ({key}) and numba cannot be imported")
            return getattr(module, self.__name__)(*args)
        function, returns = found
        flat: list = []
        for a in args:
            _flatten(a, flat)
        result = ctypes.c_int64(0)
        excinfo = ctypes.c_void_p(0)
        status = function(ctypes.byref(result), ctypes.byref(excinfo), *flat)
        self.calls += 1
        if status not in _RETURNED:
            # the exception numba would raise is described in its own pickled form: named here
            raise ArithmeticError(f"plpy_anon: the compiled kernel {self.__name__} raised (numba "
                                  f"status {status}; these kernels raise on a division by zero)")
        if status == -2 or returns == "none":
            return None
        value = result.value
        return bool(value & 0xFF) if returns == "b" else value


class LoadedKernels:
    """The kernels of one module loaded by :func:`load`: each a :class:`Kernel` attribute, and
    the module's integer constants."""

    def __init__(self, name, engine, kernels, constants, fallback):
        self.__name__ = name
        self._engine = engine           # owns the machine code the kernels point into
        self._fallback = fallback
        for attr, value in constants.items():
            setattr(self, attr, value)
        for attr, kernel in kernels.items():
            setattr(self, attr, kernel)

    def __getattr__(self, attr):
        """What the object file does not hold (the module's private kernels): numba's."""
        if attr.startswith("__"):
            raise AttributeError(attr)
        module = self._fallback()
        if module is None:
            raise AttributeError(f"{attr}: not in the kernels' object file, and numba cannot be "
                                 "imported")
        return getattr(module, attr)


def _header(module_name: str, source: Path, ll) -> dict:
    """What a file must have been written for to be loaded in this process: the kernels' source,
    the numba that compiled them (its calling convention), the llvmlite and CPU that run them."""
    import llvmlite

    return {"module": module_name, "source_sha256": source_digest(source),
            "numba": _numba_stamp(), "llvmlite": llvmlite.__version__,
            "triple": ll.get_process_triple(), "cpu": ll.get_host_cpu_name(),
            "features": ll.get_host_cpu_features().flatten()}


def _numba_stamp() -> str | None:
    """The digest of the installed numba's version file, found without importing numba."""
    spec = importlib.util.find_spec("numba")
    if spec is None or not spec.submodule_search_locations:
        return None
    try:
        return source_digest(Path(spec.submodule_search_locations[0]) / "_version.py")
    except OSError:
        return None


def cache_file(directory: Path, module_name: str) -> Path:
    return directory / f"{module_name.rsplit('.', 1)[-1]}.kernels"


def _safe(st: os.stat_result) -> bool:
    """Whether what ``st`` describes belongs to this OS user and nobody else can write it."""
    return st.st_uid == os.geteuid() and not st.st_mode & 0o022


def _read_owned(path: Path) -> bytes | None:
    """The bytes of the regular file ``path`` when it and its directory are :func:`_safe`, else
    None. Each check is made on the descriptor then read from (the directory opened, the file
    opened in it without following a symlink): a name swapped between a check and the read, or
    a link out of the directory, is never what is read."""
    try:
        directory = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not _safe(os.fstat(directory)):
            return None
        # O_NONBLOCK: a FIFO under the file's name does not wait for a writer
        fd = os.open(path.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     dir_fd=directory)
    except OSError:
        return None
    finally:
        os.close(directory)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or not _safe(st):
            return None
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def _parse(data: bytes | None):
    """(metadata, object bytes) of a file :func:`export` wrote, or None (any other bytes: a
    torn file's included)."""
    start = len(MAGIC) + 8
    if data is None or not data.startswith(MAGIC) or len(data) < start:
        return None
    (size,) = struct.unpack_from("<Q", data, len(MAGIC))
    try:
        meta = json.loads(data[start:start + size])
    except ValueError:
        return None
    if not isinstance(meta, dict) or not isinstance(meta.get("header"), dict):
        return None
    return meta, data[start + size:]


def _read(path: Path):
    """:func:`_parse` of ``path``'s bytes, or None."""
    try:
        return _parse(path.read_bytes())
    except OSError:
        return None


def current(module_name: str, source: Path, directory: Path, written_with: str) -> bool:
    """Whether :func:`export` would write the file as it is: the same header, and the same
    ``written_with`` (what chose the signatures exported)."""
    import llvmlite.binding as ll

    read = _read(cache_file(directory, module_name))
    return read is not None and read[0].get("written_with") == written_with and \
        read[0].get("header") == _header(module_name, source, ll)


def load(module_name: str, source: Path, directory: Path, fallback):
    """A :class:`LoadedKernels` of ``module_name`` from ``directory``, or None (see the module's
    doc). ``fallback()``: the numba-compiled module, for calls of other argument types."""
    read = _parse(_read_owned(cache_file(directory, module_name)))
    if read is None:
        return None
    meta, obj = read

    import llvmlite.binding as ll

    if meta.get("header") != _header(module_name, source, ll):
        return None
    if hashlib.sha256(obj).hexdigest() != meta["object_sha256"]:
        return None                    # a torn or altered file: LLVM does not check objects
    ll.initialize_native_target()
    ll.initialize_native_asmprinter()
    target = ll.Target.from_triple(meta["header"]["triple"])
    machine = target.create_target_machine(cpu=meta["header"]["cpu"],
                                           features=meta["header"]["features"],
                                           reloc="static", codemodel="jitdefault", jit=True)
    # an engine makes the process's own symbols (libm's log) visible to the look-up below
    engine = ll.create_mcjit_compiler(ll.parse_assembly(""), machine)
    if any(ll.address_of_symbol(name) is None for name in meta["undefined"]):
        return None                    # MCJIT would abort the process on an unresolved symbol
    engine.add_object_file(ll.ObjectFileRef.from_data(obj))
    engine.finalize_object()
    kernels = {}
    for name, signatures in meta["kernels"].items():
        table = {}
        for sig in signatures:
            address = engine.get_function_address(sig["symbol"])
            if not address:
                return None
            prototype = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p,
                                         *(_CTYPES.get(t, ctypes.c_void_p) for t in sig["args"]))
            table[sig["key"]] = (prototype(address), sig["returns"])
        kernels[name] = Kernel(name, table, fallback)
    return LoadedKernels(module_name, engine, kernels, meta["constants"], fallback)


# --- export: with numba loaded, at install ---------------------------------------------------

def _numba_key(t) -> str:
    from numba.core import types
    from numba.np.numpy_support import as_dtype

    if isinstance(t, types.Array):
        return (f"a{as_dtype(t.dtype).str}:{t.ndim}:{t.layout}:{'w' if t.mutable else 'r'}")
    if isinstance(t, types.Boolean):
        return "b"
    if isinstance(t, types.Integer):
        return f"{'i' if t.signed else 'u'}{t.bitwidth}"
    if isinstance(t, types.Float):
        return f"f{t.bitwidth}"
    if isinstance(t, types.BaseTuple):
        return "(" + ",".join(_numba_key(e) for e in t.types) + ")"
    raise TypeError(f"no key for numba type {t}")


def _return_kind(t) -> str:
    from numba.core import types

    if isinstance(t, types.NoneType):
        return "none"
    if isinstance(t, types.Boolean):
        return "b"
    if isinstance(t, types.Integer) and t.bitwidth == 64 and t.signed:
        return "i64"
    raise TypeError(f"no return kind for numba type {t}")


def _undefined_symbols(obj: bytes) -> list[str]:
    """The undefined global symbols of an ELF64 little-endian object file."""
    if obj[:4] != b"\x7fELF" or obj[4] != 2 or obj[5] != 1:
        raise ValueError("not an ELF64 little-endian object")
    shoff, = struct.unpack_from("<Q", obj, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", obj, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", obj, shoff + i * shentsize)
                for i in range(shnum)]
    names = []
    for _, sh_type, _, _, offset, size, link, _, _, entsize in sections:
        if sh_type != 2:                           # SHT_SYMTAB
            continue
        strings = sections[link]
        for at in range(offset, offset + size, entsize):
            st_name, st_info, _, st_shndx, _, _ = struct.unpack_from("<IBBHQQ", obj, at)
            if st_shndx == 0 and st_name and st_info >> 4 in (1, 2):      # UND, GLOBAL/WEAK
                end = obj.index(b"\0", strings[4] + st_name)
                names.append(obj[strings[4] + st_name:end].decode())
    return sorted(set(names))


def export(module, directory: Path, written_with: str | None = None) -> Path | None:
    """Write the compiled signatures of ``module``'s public kernels (numba dispatchers whose
    name has no leading underscore) into :func:`cache_file`; the path, or None when there are
    none. Runs with numba loaded and the kernels compiled in this process (numba's cache keeps
    no IR). ``written_with``: recorded for :func:`current`."""
    import llvmlite.binding as ll
    from numba.core.dispatcher import Dispatcher

    # numba's CPython and C entry points of each kernel: they unbox through numba's helper
    # library, which a process without numba lacks
    wrappers = ("_ZN7cpython", "cfunc.")
    linked = None
    kernels: dict = {}
    constants = {}
    machine = None
    for attr, value in sorted(vars(module).items()):
        if isinstance(value, int) and not isinstance(value, bool) and attr.isupper():
            constants[attr] = value
        if attr.startswith("_") or not isinstance(value, Dispatcher):
            continue
        for cres in value.overloads.values():
            if not cres.library.get_llvm_str().strip().count("define "):
                raise RuntimeError(f"{attr}: loaded from numba's cache, which keeps no IR")
            ir = ll.parse_assembly(cres.library.get_llvm_str())
            symbol = cres.fndesc.llvm_func_name
            for function in ir.functions:
                if function.is_declaration:
                    continue
                if function.name.startswith(wrappers):
                    function.linkage = "available_externally"    # emitted nowhere
                elif function.name == symbol:
                    function.linkage = "external"
            fnty = cres.target_context.call_conv.get_function_type(
                cres.signature.return_type, cres.signature.args)
            kernels.setdefault(attr, []).append({
                "key": ",".join(_numba_key(t) for t in cres.signature.args),
                "symbol": symbol, "returns": _return_kind(cres.signature.return_type),
                "args": [_llvm_type(t) for t in fnty.args[2:]]})
            machine = cres.library.codegen._tm
            if linked is None:
                linked = ir
            else:
                linked.link_in(ir)
    if linked is None:
        return None
    obj = machine.emit_object(linked)
    meta = {"header": _header(module.__name__, Path(module.__file__), ll),
            "kernels": kernels, "constants": constants, "undefined": _undefined_symbols(obj),
            "object_sha256": hashlib.sha256(obj).hexdigest(), "written_with": written_with}
    blob = json.dumps(meta, sort_keys=True).encode()
    path = cache_file(directory, module.__name__)
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(MAGIC + struct.pack("<Q", len(blob)) + blob + obj)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
    return path


def _llvm_type(t) -> str:
    """An llvmlite.ir argument type as :data:`_CTYPES` names it (pointers: anything else)."""
    text = str(t)
    return text if text in _CTYPES else "ptr"
