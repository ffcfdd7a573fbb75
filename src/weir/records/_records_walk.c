/*
 * The per-record walk of a produced batch, compiled: the check the broker runs on every record
 * of every batch it appends. Built from this source by the normal install (setup.py).
 *
 * inner_problem(records, count) walks `count` records of an uncompressed records section and
 * returns None when every record's length frames it inside the section, every record is long
 * enough for its own attributes, timestamp delta and offset delta, every offset delta equals the
 * record's index, and the records tile the section exactly. Otherwise it returns a tuple
 * (problem, index, value) naming the first fault; weir.records.validation turns it into the
 * RecordError a client gets.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

enum problem {
    TRUNCATED = 1,      /* a varint runs past the section: (index, position) */
    OVERRUNS = 2,       /* the record's length is not positive or runs past the section */
    TOO_SHORT = 3,      /* the record is shorter than its own fields */
    OFFSET_DELTA = 4,   /* (index, the delta it has) */
    TRAILING = 5,       /* (count, bytes after the last record) */
};

/* A zig-zag varint (up to 64 bits) at *pos, not reading at or past `end`. */
static int read_varlong(const uint8_t *data, Py_ssize_t end, Py_ssize_t *pos, int64_t *out)
{
    uint64_t raw = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (*pos >= end)
            return 0;
        uint8_t byte = data[(*pos)++];
        raw |= (uint64_t)(byte & 0x7F) << shift;
        if (!(byte & 0x80)) {
            *out = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
            return 1;
        }
    }
    return 0;
}

static PyObject *fault(int problem, Py_ssize_t index, long long value)
{
    return Py_BuildValue("(inL)", problem, index, value);
}

static PyObject *walk(const uint8_t *data, Py_ssize_t end, Py_ssize_t count)
{
    Py_ssize_t pos = 0;
    for (Py_ssize_t index = 0; index < count; index++) {
        int64_t length, timestamp_delta, offset_delta;
        Py_ssize_t start = pos;
        if (!read_varlong(data, end, &pos, &length))
            return fault(TRUNCATED, index, start);
        Py_ssize_t body = pos;
        if (length <= 0 || length > end - body)
            return fault(OVERRUNS, index, length);
        Py_ssize_t record_end = body + (Py_ssize_t)length;
        pos = body + 1; /* attributes */
        if (!read_varlong(data, record_end, &pos, &timestamp_delta)
            || !read_varlong(data, record_end, &pos, &offset_delta))
            return fault(TOO_SHORT, index, length);
        if (offset_delta != index)
            return fault(OFFSET_DELTA, index, offset_delta);
        pos = record_end;
    }
    if (pos != end)
        return fault(TRAILING, count, end - pos);
    Py_RETURN_NONE;
}

static PyObject *inner_problem(PyObject *self, PyObject *args)
{
    Py_buffer records;
    Py_ssize_t count;
    if (!PyArg_ParseTuple(args, "y*n", &records, &count))
        return NULL;
    PyObject *result = walk((const uint8_t *)records.buf, records.len, count);
    PyBuffer_Release(&records);
    return result;
}

static PyMethodDef methods[] = {
    {"inner_problem", inner_problem, METH_VARARGS,
     "inner_problem(records, count) -> None or (problem, index, value)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_records_walk", "The per-record walk of a produced batch.", -1,
    methods,
};

PyMODINIT_FUNC PyInit__records_walk(void)
{
    return PyModule_Create(&module);
}
