/* Optional C speed-up of ingest.normalise (pure-Python fallback where it is not built).
 *
 * normalise_ascii(text) returns exactly what ingest.normalise.normalise_ascii returns
 * (the ASCII path of normalise_text), or None when text is not ASCII;
 * for any text, clean_unicode(text) does rules 1 and 2 (None if text holds lone
 * surrogates) and collapse_whitespace(text) rules 3 and 4, as the functions of the
 * same names in ingest.normalise do.
 * tests/ingest/test_normalise_speedups.py compares both on random and real text.
 * The rules, in order:
 *   1. "\r\n" and "\r" (and U+2028, U+2029, U+0085) become "\n";
 *   2. control characters (0x00-0x08, 0x0b, 0x0c, 0x0e-0x1f, 0x7f; also 0x80-0x9f
 *      but 0x85, and U+FEFF) are removed;
 *   3. line by line: a line starting with ``` or ~~~ opens or closes a fenced block;
 *      fence lines, lines inside a fence and indented lines (first character a space
 *      or a tab) are kept; on any other line each run of whitespace becomes one space;
 *      every line loses its trailing whitespace;
 *   4. three or more newlines in a row become two; newlines at both ends go.
 * (Between clean_unicode and collapse_whitespace the Python caller applies NFC.)
 * No rule makes the text longer, so the result fits in a buffer of the input's size.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

/* ---- rules 3 and 4 for ASCII text (bytes) ---- */
static Py_ssize_t ascii_find_newline(const char *s, Py_ssize_t n) {
    const char *found = memchr(s, '\n', (size_t)n);
    return found ? found - s : -1;
}
#define CHAR char
#define IS_SPACE(c) (((c) == ' ') | ((c) == '\t'))
#define FIND_NEWLINE ascii_find_newline
#define NAME(x) ascii_##x
#include "_normalise_lines.h"
#undef CHAR
#undef IS_SPACE
#undef FIND_NEWLINE
#undef NAME

/* ---- rules 3 and 4 for any text (UCS-4 code points) ---- */
static Py_ssize_t ucs4_find_newline(const Py_UCS4 *s, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++)
        if (s[i] == '\n') return i;
    return -1;
}
#define CHAR Py_UCS4
#define IS_SPACE(c) ((c) != '\n' && Py_UNICODE_ISSPACE(c))
#define FIND_NEWLINE ucs4_find_newline
#define NAME(x) ucs4_##x
#include "_normalise_lines.h"
#undef CHAR
#undef IS_SPACE
#undef FIND_NEWLINE
#undef NAME

/* ---- rules 1 and 2 for ASCII text ---- */

/* A control character or a carriage return (a branch-free OR the compiler vectorises). */
static int needs_cleaning(const unsigned char *s, Py_ssize_t n) {
    unsigned char found = 0; /* (a byte: the loop vectorises over 16 bytes at once) */
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        found |= ((c < 0x20) & (c != '\t') & (c != '\n')) | (c == 0x7f);
    }
    return found;
}

/* False only if rules 1-4 leave s unchanged (true can be a false alarm): no control
 * character, tab or carriage return; no space before a newline or at the end; no two
 * spaces after a character that is neither a space nor a newline (indentation is
 * allowed); no three newlines in a row; no newline at either end. One branch-free pass. */
static int may_change(const unsigned char *s, Py_ssize_t n) {
    if (n == 0) return 0;
    if (s[0] == '\n' || s[n - 1] == '\n' || s[n - 1] == ' ') return 1;
    unsigned char found = 0; /* (a byte: the loop vectorises over 16 bytes at once) */
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        found |= ((c < 0x20) & (c != '\n')) | (c == 0x7f);
    }
    for (Py_ssize_t i = 1; i + 2 < n; i++) {
        unsigned char before = s[i - 1], c = s[i], next = s[i + 1], after = s[i + 2];
        found |= (c == ' ') & (next == '\n');
        found |= (before != ' ') & (before != '\n') & (c == ' ') & (next == ' ');
        found |= (c == '\n') & (next == '\n') & (after == '\n');
    }
    /* the pairs the window above does not reach: (0, 1) and (n - 2, n - 1) */
    if (n >= 2) {
        found |= (s[0] == ' ') & (s[1] == '\n');
        found |= (s[n - 2] == ' ') & (s[n - 1] == '\n');
        found |= (n >= 3) & (s[n - 3] != ' ') & (s[n - 3] != '\n') & (s[n - 2] == ' ') &
                 (s[n - 1] == ' ');
    }
    return found;
}

static Py_ssize_t clean_controls(const unsigned char *src, Py_ssize_t n, char *buf) {
    Py_ssize_t w = 0;
    for (Py_ssize_t r = 0; r < n; r++) {
        unsigned char c = src[r];
        if (c == '\r') {
            buf[w++] = '\n';
            if (r + 1 < n && src[r + 1] == '\n') r++;
        } else if (!((c < 0x20 && c != '\t' && c != '\n') || c == 0x7f)) {
            buf[w++] = (char)c;
        }
    }
    return w;
}

/* ---- rules 1 and 2 for any text ---- */

static int is_unicode_control(Py_UCS4 c) {
    return (c < 0x20 && c != '\t' && c != '\n') || (c >= 0x7f && c <= 0x9f) || c == 0xfeff;
}

static int is_line_break(Py_UCS4 c) {
    return c == '\r' || c == 0x85 || c == 0x2028 || c == 0x2029;
}

static int check_str(PyObject *text, const char *function);

static PyObject *clean_unicode(PyObject *module, PyObject *text) {
    if (!check_str(text, "clean_unicode")) return NULL;
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    Py_UCS4 *buf = PyUnicode_AsUCS4Copy(text);
    if (buf == NULL) return NULL;
    Py_ssize_t w = 0;
    for (Py_ssize_t r = 0; r < n; r++) {
        Py_UCS4 c = buf[r];
        if (c >= 0xd800 && c <= 0xdfff) { /* a lone surrogate: not valid Unicode */
            PyMem_Free(buf);
            Py_RETURN_NONE;
        }
        if (is_line_break(c)) {
            buf[w++] = '\n';
            if (c == '\r' && r + 1 < n && buf[r + 1] == '\n') r++;
        } else if (!is_unicode_control(c)) {
            buf[w++] = c;
        }
    }
    PyObject *result = PyUnicode_FromKindAndData(PyUnicode_4BYTE_KIND, buf, w);
    PyMem_Free(buf);
    return result;
}

static int check_str(PyObject *text, const char *function) {
    if (PyUnicode_Check(text)) return 1;
    PyErr_Format(PyExc_TypeError, "%s expects a str, got %s", function, Py_TYPE(text)->tp_name);
    return 0;
}

static PyObject *normalise_ascii(PyObject *module, PyObject *text) {
    if (!check_str(text, "normalise_ascii")) return NULL;
    if (!PyUnicode_IS_ASCII(text)) Py_RETURN_NONE;
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    const unsigned char *src = PyUnicode_1BYTE_DATA(text);
    if (!may_change(src, n)) {
        Py_INCREF(text); /* already normal (most documents): the same object, no copy */
        return text;
    }
    /* out: the result; clean: rules 1-2 applied, only where they change something */
    char *out = PyMem_Malloc((size_t)n + 1);
    char *clean = NULL;
    if (out == NULL) return PyErr_NoMemory();
    const char *lines = (const char *)src;
    Py_ssize_t lines_len = n;
    if (needs_cleaning(src, n)) {
        clean = PyMem_Malloc((size_t)n + 1);
        if (clean == NULL) {
            PyMem_Free(out);
            return PyErr_NoMemory();
        }
        lines_len = clean_controls(src, n, clean);
        lines = clean;
    }
    Py_ssize_t len = ascii_collapse_lines(lines, lines_len, out);
    PyObject *result;
    if (len == n && memcmp(out, src, (size_t)n) == 0) {
        Py_INCREF(text); /* unchanged: the same object, no copy */
        result = text;
    } else {
        result = PyUnicode_New(len, 127);
        if (result != NULL) memcpy(PyUnicode_1BYTE_DATA(result), out, (size_t)len);
    }
    PyMem_Free(clean);
    PyMem_Free(out);
    return result;
}

static PyObject *collapse_whitespace(PyObject *module, PyObject *text) {
    if (!check_str(text, "collapse_whitespace")) return NULL;
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    Py_UCS4 *src = PyUnicode_AsUCS4Copy(text);
    if (src == NULL) return NULL;
    Py_UCS4 *out = PyMem_Malloc(((size_t)n + 1) * sizeof(Py_UCS4));
    if (out == NULL) {
        PyMem_Free(src);
        return PyErr_NoMemory();
    }
    Py_ssize_t len = ucs4_collapse_lines(src, n, out);
    /* (FromKindAndData picks the narrowest kind that holds the result) */
    PyObject *result = PyUnicode_FromKindAndData(PyUnicode_4BYTE_KIND, out, len);
    PyMem_Free(src);
    PyMem_Free(out);
    return result;
}

static PyMethodDef methods[] = {
    {"normalise_ascii", normalise_ascii, METH_O,
     "normalise_ascii(text) -> str | None: ingest.normalise.normalise_ascii, or None if not "
     "ASCII"},
    {"clean_unicode", clean_unicode, METH_O,
     "clean_unicode(text) -> str | None: line breaks and control characters as "
     "ingest.normalise.clean_unicode, or None if text holds lone surrogates"},
    {"collapse_whitespace", collapse_whitespace, METH_O,
     "collapse_whitespace(text) -> str: the line-by-line rules of "
     "ingest.normalise._collapse_whitespace"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_normalise_speedups",
    "C speed-up of ingest.normalise (see ingest/_normalise_speedups.c)", -1, methods,
};

PyMODINIT_FUNC PyInit__normalise_speedups(void) { return PyModule_Create(&module_def); }
