/* Rules 3 and 4 of ingest/_normalise_speedups.c over an array of CHAR.
 *
 * Included once per character width, the way CPython's stringlib is: the includer
 * defines CHAR (the element type), IS_SPACE(c) (0 or 1: whitespace other than "\n";
 * written with bitwise operators so that loops over it vectorise), FIND_NEWLINE(s, n)
 * (index of the first "\n" in s[0:n], or -1) and NAME(x) (a per-width function name).
 */

/* A line that is not trimmed the same way by collapse_runs: whitespace other than one
 * plain space. The line has no trailing whitespace (its last character is not checked). */
static int NAME(has_space_run)(const CHAR *s, Py_ssize_t n) {
    unsigned char found = 0; /* (a byte: the loop vectorises over 16 bytes at once) */
    for (Py_ssize_t i = 0; i + 1 < n; i++)
        found |= IS_SPACE(s[i]) & ((s[i] != ' ') | IS_SPACE(s[i + 1]));
    return found;
}

/* Each run of whitespace in s[0:n] becomes one space; returns the length written.
 * Spans between runs that change (a tab or other whitespace, or two or more in a row) are
 * copied whole: most of a line is words and single spaces. */
static Py_ssize_t NAME(collapse_runs)(const CHAR *s, Py_ssize_t n, CHAR *out) {
    Py_ssize_t w = 0, start = 0, i = 0;
    while (i < n) {
        CHAR c = s[i];
        if (!IS_SPACE(c) || (c == ' ' && !(i + 1 < n && IS_SPACE(s[i + 1])))) {
            i++;
            continue;
        }
        memcpy(out + w, s + start, (size_t)(i - start) * sizeof(CHAR));
        w += i - start;
        out[w++] = ' ';
        while (i < n && IS_SPACE(s[i])) i++;
        start = i;
    }
    memcpy(out + w, s + start, (size_t)(n - start) * sizeof(CHAR));
    return w + n - start;
}

static int NAME(opens_fence)(const CHAR *line, Py_ssize_t len) {
    return len >= 3 && ((line[0] == '`' && line[1] == '`' && line[2] == '`') ||
                        (line[0] == '~' && line[1] == '~' && line[2] == '~'));
}

/* Rules 3 and 4 from src into out (room for n); returns the length written.
 * Rule 4 is applied while writing: blank lines are noted, not written, until the next
 * non-blank line, which gets at most one blank line before it (none at the start). */
static Py_ssize_t NAME(collapse_lines)(const CHAR *src, Py_ssize_t n, CHAR *out) {
    Py_ssize_t r = 0, w = 0;
    int in_fence = 0, wrote_line = 0, pending_blank = 0;
    for (;;) {
        Py_ssize_t found = FIND_NEWLINE(src + r, n - r);
        Py_ssize_t end = found < 0 ? n : r + found;
        Py_ssize_t stripped = end;
        while (stripped > r && IS_SPACE(src[stripped - 1])) stripped--;
        const CHAR *line = src + r;
        Py_ssize_t len = stripped - r;
        if (len == 0) {
            pending_blank = 1;
        } else {
            if (wrote_line) {
                out[w++] = '\n';
                if (pending_blank) out[w++] = '\n';
            }
            pending_blank = 0;
            wrote_line = 1;
            int keep = 1; /* fence lines, fenced lines and indented lines keep their spacing */
            if (NAME(opens_fence)(line, len)) {
                in_fence = !in_fence;
            } else if (!in_fence && line[0] != ' ' && line[0] != '\t') {
                keep = !NAME(has_space_run)(line, len);
            }
            if (keep) {
                memcpy(out + w, line, (size_t)len * sizeof(CHAR));
                w += len;
            } else {
                w += NAME(collapse_runs)(line, len, out + w);
            }
        }
        if (found < 0) return w;
        r = end + 1;
    }
}
