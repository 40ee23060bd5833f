//! `ColumnBuffer`: a Rust vector exposed through Python's buffer protocol, so pyarrow wraps the
//! columns `read_batch` builds without copying them.

use std::ffi::{c_int, c_void, CStr};

use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;
use rmqstore_core::read::ColumnVec;

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
        if view.is_null() {
            return Err(PyBufferError::new_err("no buffer view to fill"));
        }
        if flags & ffi::PyBUF_WRITABLE == ffi::PyBUF_WRITABLE {
            return Err(PyBufferError::new_err("column buffers are read-only"));
        }
        let bytes = slf.get().data.bytes();
        let (ptr, len) = (bytes.as_ptr(), bytes.len());
        // SAFETY: `view` is non-null and ours to fill; the data lives as long as `obj`, which
        // the view holds a reference to (released by Python when the view is released).
        unsafe {
            (*view).obj = slf.into_any().into_ptr();
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

    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {}
}
