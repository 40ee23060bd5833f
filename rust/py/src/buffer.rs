//! `ColumnBuffer`: a Rust vector exposed through Python's buffer protocol, so pyarrow wraps the
//! columns `read_batch` builds without copying them.

use std::ffi::{c_int, c_void, CStr};

use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;
use rmqstore_core::read::{BodyBuffer, ColumnVec};

/// Read-only bytes owned by Rust, handed to Python without a copy.
#[pyclass(frozen, module = "rmqstore._rmqstore")]
pub struct ColumnBuffer {
    data: ColumnVec,
}

impl ColumnBuffer {
    pub fn new(data: ColumnVec) -> ColumnBuffer {
        ColumnBuffer { data }
    }
}

/// When Python lets go of the buffer (no array or view holds it any longer), its vector goes
/// to the core's pool of read vectors, for the next `read_batch`.
impl Drop for ColumnBuffer {
    fn drop(&mut self) {
        std::mem::replace(&mut self.data, ColumnVec::U8(Vec::new())).recycle();
    }
}

static FORMAT_BYTES: &CStr = c"B";

/// Fills `view` with the read-only bytes `[ptr, ptr + len)` owned by `obj`.
///
/// # Safety
/// `view` is non-null and the caller's to fill; the bytes live and stay unchanged as long as
/// `obj` does (the view holds a reference to it, released by Python).
unsafe fn fill_view(
    obj: Bound<'_, PyAny>,
    view: *mut ffi::Py_buffer,
    flags: c_int,
    ptr: *const u8,
    len: usize,
) -> PyResult<()> {
    if view.is_null() {
        return Err(PyBufferError::new_err("no buffer view to fill"));
    }
    if flags & ffi::PyBUF_WRITABLE == ffi::PyBUF_WRITABLE {
        return Err(PyBufferError::new_err("column buffers are read-only"));
    }
    // SAFETY: as the function's contract says.
    unsafe {
        (*view).obj = obj.into_ptr();
        (*view).buf = ptr as *mut c_void;
        (*view).len = len as isize;
        (*view).readonly = 1;
        (*view).itemsize = 1;
        (*view).format = if flags & ffi::PyBUF_FORMAT == ffi::PyBUF_FORMAT {
            FORMAT_BYTES.as_ptr().cast_mut()
        } else {
            std::ptr::null_mut()
        };
        (*view).ndim = 1;
        (*view).shape = if flags & ffi::PyBUF_ND == ffi::PyBUF_ND {
            &mut (*view).len
        } else {
            std::ptr::null_mut()
        };
        (*view).strides = if flags & ffi::PyBUF_STRIDES == ffi::PyBUF_STRIDES {
            &mut (*view).itemsize
        } else {
            std::ptr::null_mut()
        };
        (*view).suboffsets = std::ptr::null_mut();
        (*view).internal = std::ptr::null_mut();
    }
    Ok(())
}

/// A range of a mapped commitlog segment that `binary_view` bodies point into, handed to
/// Python without a copy. It holds the segment's read-only mapping: the bytes stay mapped and
/// unchanged (a truncation of the file first gives live mappings a private copy) until Python
/// drops the last array or view over them, whatever happens to the store or the file.
#[pyclass(frozen, module = "rmqstore._rmqstore")]
pub struct SegmentBuffer {
    range: BodyBuffer,
}

impl SegmentBuffer {
    pub fn new(range: BodyBuffer) -> SegmentBuffer {
        SegmentBuffer { range }
    }
}

#[pymethods]
impl SegmentBuffer {
    fn __len__(&self) -> usize {
        self.range.bytes().len()
    }

    fn __repr__(&self) -> String {
        format!(
            "SegmentBuffer(start={}, len={})",
            self.range.start,
            self.range.end - self.range.start
        )
    }

    /// Exposes the bytes as a read-only, one-dimensional buffer of unsigned bytes.
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        let bytes = slf.get().range.bytes();
        let (ptr, len) = (bytes.as_ptr(), bytes.len());
        // SAFETY: the range's mapping lives as long as `slf` (it holds the `Arc`), and its
        // bytes never change (module doc of `SegmentView` in the core).
        unsafe { fill_view(slf.into_any(), view, flags, ptr, len) }
    }

    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {}
}

#[pymethods]
impl ColumnBuffer {
    fn __len__(&self) -> usize {
        self.data.bytes().len()
    }

    /// Exposes the bytes as a read-only, one-dimensional buffer of unsigned bytes.
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        let bytes = slf.get().data.bytes();
        let (ptr, len) = (bytes.as_ptr(), bytes.len());
        // SAFETY: the data lives as long as `slf`, which the view holds a reference to.
        unsafe { fill_view(slf.into_any(), view, flags, ptr, len) }
    }

    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {}
}
