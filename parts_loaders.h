/* parts_loaders.h - the CIFAR-10 and NumPy .npy loaders, to be pasted into
   mirror.h: the declarations into "// >>declarations: data" (after
   mirror_dataset_load_mnist), the implementation into "// >>data" right
   after the end of mirror_dataset_load_mnist. tests/test_loaders.c tests them. */

/* DECLARATIONS: paste into // >>declarations: data */
/* CIFAR-10 binary batches (data_batch_1.bin ... test_batch.bin), the npaths
   files concatenated in order into one dataset: records of 3073 bytes, a
   label byte in [0, 10) then 32x32 pixels as R, G and B planes, giving
   3x32x32 images (NCHW as stored) scaled to [0,1] and 10 classes. Plain or
   gzip files (gzip needs MIRROR_ZLIB). On error ds is left empty. */
MIRROR_API int mirror_dataset_load_cifar10(mirror_dataset *ds, const char *const *paths, size_t npaths,
                                           mirror_error *err);
/* NumPy .npy files (format 1.0, 2.0 or 3.0, C order): x of dtype <f4 (copied)
   or |u1 (scaled to [0,1]) and shape (n, features) (as features x 1 x 1),
   (n, height, width) (one channel) or (n, channels, height, width); y, or
   NULL for no labels, of dtype <i4, <i8 or |u1 and shape (n,), every label
   >= 0, num_classes the largest plus one (at most 65536). Plain or gzip files
   (gzip needs MIRROR_ZLIB). On error ds is left empty. */
MIRROR_API int mirror_dataset_load_npy(mirror_dataset *ds, const char *x_path, const char *y_path,
                                       mirror_error *err);

/* IMPLEMENTATION */

/* CIFAR-10: a batch is records of a label byte and 3 x 32 x 32 pixel bytes. */
#define MIRROR__CIFAR_PIXELS 3072
#define MIRROR__CIFAR_RECORD (1 + MIRROR__CIFAR_PIXELS)

/* Checks one batch in memory: a positive whole number of records, every
   label in [0, 10). */
static int mirror__cifar10_check(const unsigned char *p, size_t size, const char *name, mirror_error *err)
{
    size_t i;
    if (!size)
        return mirror__error(err, MIRROR_ERR_FORMAT, "%s: empty file (a CIFAR-10 batch is records of %d bytes)",
                             name, MIRROR__CIFAR_RECORD);
    if (size % MIRROR__CIFAR_RECORD)
        return mirror__error(err, MIRROR_ERR_FORMAT,
                             "%s: truncated: %zu bytes is not a whole number of %d-byte CIFAR-10 records "
                             "(%zu bytes over)",
                             name, size, MIRROR__CIFAR_RECORD, size % MIRROR__CIFAR_RECORD);
    for (i = 0; i < size / MIRROR__CIFAR_RECORD; i++)
        if (p[i * MIRROR__CIFAR_RECORD] > 9)
            return mirror__error(err, MIRROR_ERR_LABEL, "%s: label %u of record %zu is outside [0, 10)", name,
                                 p[i * MIRROR__CIFAR_RECORD], i);
    return MIRROR_OK;
}

/* One CIFAR-10 batch (or batches back to back) from memory into ds, which
   is overwritten; on error ds is left empty. name is for the messages. */
static int mirror__parse_cifar10(mirror_dataset *ds, const unsigned char *p, size_t size, const char *name,
                                 mirror_error *err)
{
    size_t n, i, j;
    int rc;
    memset(ds, 0, sizeof *ds);
    if ((rc = mirror__cifar10_check(p, size, name, err)) != MIRROR_OK) return rc;
    n = size / MIRROR__CIFAR_RECORD;
    ds->x = (float *)mirror__alloc(n, MIRROR__CIFAR_PIXELS * sizeof(float));
    ds->labels = (int32_t *)mirror__alloc(n, sizeof(int32_t));
    if (!ds->x || !ds->labels) {
        mirror_dataset_free(ds);
        return mirror__error(err, MIRROR_ERR_NO_MEMORY, "%s: no memory for %zu images", name, n);
    }
    for (i = 0; i < n; i++) {
        const unsigned char *r = p + i * MIRROR__CIFAR_RECORD;
        float *x = ds->x + i * MIRROR__CIFAR_PIXELS;
        ds->labels[i] = r[0];
        for (j = 0; j < MIRROR__CIFAR_PIXELS; j++) x[j] = (float)r[1 + j] * (1.0f / 255.0f);
    }
    ds->count = n;
    ds->channels = 3;
    ds->height = 32;
    ds->width = 32;
    ds->num_classes = 10;
    return MIRROR_OK;
}

MIRROR_API int mirror_dataset_load_cifar10(mirror_dataset *ds, const char *const *paths, size_t npaths,
                                           mirror_error *err)
{
    unsigned char **buf = NULL, *all = NULL;
    size_t *size = NULL, i, total = 0, at = 0;
    int rc = MIRROR_OK;
    if (ds) memset(ds, 0, sizeof *ds);
    if (!ds || !paths || !npaths)
        return mirror__error(err, MIRROR_ERR_ARGUMENT, "mirror_dataset_load_cifar10: %s",
                             !npaths && ds && paths ? "no files (npaths is 0)" : "NULL argument");
    for (i = 0; i < npaths; i++)
        if (!paths[i])
            return mirror__error(err, MIRROR_ERR_ARGUMENT, "mirror_dataset_load_cifar10: paths[%zu] is NULL", i);
    buf = (unsigned char **)mirror__alloc(npaths, sizeof *buf);
    size = (size_t *)mirror__alloc(npaths, sizeof *size);
    if (buf)
        for (i = 0; i < npaths; i++) buf[i] = NULL;
    if (!buf || !size) {
        rc = mirror__error(err, MIRROR_ERR_NO_MEMORY, "mirror_dataset_load_cifar10: no memory for %zu files",
                           npaths);
        goto done;
    }
    /* Every file is read and checked (its own name in the messages), then
       the records are put back to back and decoded in one pass. */
    for (i = 0; i < npaths; i++) {
        if ((rc = mirror__read_file(paths[i], &buf[i], &size[i], err)) != MIRROR_OK ||
            (rc = mirror__cifar10_check(buf[i], size[i], paths[i], err)) != MIRROR_OK)
            goto done;
        if (size[i] > (size_t)-1 - total) {
            rc = mirror__error(err, MIRROR_ERR_NO_MEMORY, "%s: the batches together are too large", paths[i]);
            goto done;
        }
        total += size[i];
    }
    if (npaths == 1) {
        all = buf[0];
        buf[0] = NULL;
    } else {
        if (!(all = (unsigned char *)mirror__alloc(total, 1))) {
            rc = mirror__error(err, MIRROR_ERR_NO_MEMORY, "%s: no memory for %zu bytes of batches", paths[0],
                               total);
            goto done;
        }
        for (i = 0; i < npaths; i++) {
            memcpy(all + at, buf[i], size[i]);
            at += size[i];
            MIRROR_FREE(buf[i]);
            buf[i] = NULL;
        }
    }
    rc = mirror__parse_cifar10(ds, all, total, paths[0], err);
done:
    if (buf)
        for (i = 0; i < npaths; i++) MIRROR_FREE(buf[i]);
    MIRROR_FREE(buf);
    MIRROR_FREE(size);
    MIRROR_FREE(all);
    if (rc) mirror_dataset_free(ds);
    return rc;
}

/* NumPy .npy: "\x93NUMPY", major and minor version, the header length (2
   bytes little-endian in 1.0, 4 in 2.0 and 3.0), then a Python dict literal
   {'descr': '<f4', 'fortran_order': False, 'shape': (n, h, w), } padded
   with spaces to a newline, then the data in C order. */
enum { MIRROR__NPY_U1 = 1, MIRROR__NPY_I4, MIRROR__NPY_I8, MIRROR__NPY_F4 };
#define MIRROR__NPY_MAX_DIMS 4

typedef struct mirror__npy {
    int dtype;                          /* MIRROR__NPY_* */
    char descr[32];                     /* the dtype as written, for messages */
    size_t ndim, shape[MIRROR__NPY_MAX_DIMS];
    size_t count;                       /* elements: the product of shape (1 for ()) */
    const unsigned char *data;          /* count elements inside p, little-endian, maybe unaligned */
} mirror__npy;

static uint32_t mirror__le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t mirror__le64(const unsigned char *p)
{
    return (uint64_t)mirror__le32(p) | (uint64_t)mirror__le32(p + 4) << 32;
}

/* The header text from s[*i] to s[n]: whitespace, one token, a quoted string. */
static void mirror__npy_space(const unsigned char *s, size_t n, size_t *i)
{
    while (*i < n && (s[*i] == ' ' || s[*i] == '\t' || s[*i] == '\n' || s[*i] == '\r')) ++*i;
}

static int mirror__npy_eat(const unsigned char *s, size_t n, size_t *i, char c)
{
    mirror__npy_space(s, n, i);
    if (*i < n && s[*i] == (unsigned char)c) {
        ++*i;
        return 1;
    }
    return 0;
}

/* A word (True, False) that is not the start of a longer name. */
static int mirror__npy_word(const unsigned char *s, size_t n, size_t *i, const char *word)
{
    size_t len = strlen(word);
    unsigned char next;
    mirror__npy_space(s, n, i);
    if (n - *i < len || memcmp(s + *i, word, len) != 0) return 0;
    next = *i + len < n ? s[*i + len] : ' ';
    if ((next >= 'a' && next <= 'z') || (next >= 'A' && next <= 'Z') || (next >= '0' && next <= '9') ||
        next == '_')
        return 0;
    *i += len;
    return 1;
}

/* A '...' or "..." string of printable characters without escapes, shorter
   than cap, into out. */
static int mirror__npy_string(const unsigned char *s, size_t n, size_t *i, char *out, size_t cap)
{
    unsigned char quote;
    size_t len = 0;
    mirror__npy_space(s, n, i);
    if (*i >= n || (s[*i] != '\'' && s[*i] != '"')) return 0;
    quote = s[(*i)++];
    for (; *i < n && s[*i] != quote; ++*i) {
        if (s[*i] < 0x20 || s[*i] > 0x7e || s[*i] == '\\' || len + 1 >= cap) return 0;
        out[len++] = (char)s[*i];
    }
    if (*i >= n) return 0;
    ++*i;
    out[len] = '\0';
    return 1;
}

static int mirror__parse_npy(const unsigned char *p, size_t size, const char *name, mirror__npy *out,
                             mirror_error *err)
{
    static const char *const keys[3] = {"descr", "fortran_order", "shape"};
    const unsigned char *s;
    char key[32];
    size_t pre, hlen, n, i = 0, k, ndim = 0, count = 1, elem, bytes, rest;
    int seen[3] = {0, 0, 0}, fortran = 0;
    unsigned major, minor;
    memset(out, 0, sizeof *out);
    for (i = 0; i < 6 && i < size; i++)
        if (p[i] != (unsigned char)"\x93NUMPY"[i])
            return mirror__error(err, MIRROR_ERR_FORMAT, "%s: bad magic (not a .npy file)", name);
    if (size < 8)
        return mirror__error(err, MIRROR_ERR_FORMAT, "%s: truncated: %zu bytes, a .npy file starts with "
                             "a 10-byte preamble", name, size);
    major = p[6];
    minor = p[7];
    if (major < 1 || major > 3 || minor != 0)
        return mirror__error(err, MIRROR_ERR_UNSUPPORTED, "%s: .npy format version %u.%u (only 1.0, 2.0 and 3.0)",
                             name, major, minor);
    pre = major == 1 ? 10 : 12;
    if (size < pre)
        return mirror__error(err, MIRROR_ERR_FORMAT, "%s: truncated: %zu bytes, a version %u.0 .npy file "
                             "starts with a %zu-byte preamble", name, size, major, pre);
    hlen = major == 1 ? (size_t)p[8] | (size_t)p[9] << 8 : (size_t)mirror__le32(p + 8);
    if (hlen > size - pre)
        return mirror__error(err, MIRROR_ERR_FORMAT, "%s: truncated header: %zu of %zu bytes", name,
                             size - pre, hlen);
    s = p + pre;
    n = hlen;
    i = 0;
    /* The dict: quoted keys, each of the three exactly once, in any order,
       entries separated by commas, a trailing comma allowed. */
    if (!mirror__npy_eat(s, n, &i, '{'))
        return mirror__error(err, MIRROR_ERR_FORMAT, "%s: the header is not a dict", name);
    for (;;) {
        if (mirror__npy_eat(s, n, &i, '}')) break;
        if (!mirror__npy_string(s, n, &i, key, sizeof key))
            return mirror__error(err, MIRROR_ERR_FORMAT, "%s: header: expected a quoted key at byte %zu", name,
                                 pre + i);
        for (k = 0; k < 3 && strcmp(key, keys[k]) != 0; k++) continue;
        if (k == 3) return mirror__error(err, MIRROR_ERR_FORMAT, "%s: header: unexpected key '%s'", name, key);
        if (seen[k]) return mirror__error(err, MIRROR_ERR_FORMAT, "%s: header: key '%s' twice", name, key);
        seen[k] = 1;
        if (!mirror__npy_eat(s, n, &i, ':'))
            return mirror__error(err, MIRROR_ERR_FORMAT, "%s: header: expected ':' after '%s'", name, key);
        if (k == 0) {
            if (mirror__npy_eat(s, n, &i, '['))
                return mirror__error(err, MIRROR_ERR_UNSUPPORTED, "%s: structured dtype (a list of fields) is "
                                     "not supported", name);
            if (!mirror__npy_string(s, n, &i, out->descr, sizeof out->descr))
                return mirror__error(err, MIRROR_ERR_FORMAT, "%s: header: 'descr' is not a short quoted string",
                                     name);
        } else if (k == 1) {
            if (mirror__npy_word(s, n, &i, "True"))
                fortran = 1;
            else if (!mirror__npy_word(s, n, &i, "False"))
                return mirror__error(err, MIRROR_ERR_FORMAT, "%s: header: 'fortran_order' is not True or False",
                                     name);
        } else {
            /* A tuple of non-negative decimal integers: (), (5,), (5, 6),
               (5, 6,); (5) is a number, not a tuple. Python 2 longs (5L)
               appear in 1.0 and 2.0 headers. */
            int comma = 1;
            if (!mirror__npy_eat(s, n, &i, '('))
                return mirror__error(err, MIRROR_ERR_FORMAT, "%s: header: 'shape' is not a tuple", name);
            for (;;) {
                size_t d = 0, digits = 0;
                if (mirror__npy_eat(s, n, &i, ')')) break;
                if (!comma)
                    return mirror__error(err, MIRROR_ERR_FORMAT, "%s: header: expected ',' or ')' in 'shape'",
                                         name);
                if (mirror__npy_eat(s, n, &i, '-'))
                    return mirror__error(err, MIRROR_ERR_FORMAT, "%s: header: negative dimension in 'shape'",
                                         name);
                for (; i < n && s[i] >= '0' && s[i] <= '9'; i++, digits++) {
                    if (digits == 1 && d == 0)
                        return mirror__error(err, MIRROR_ERR_FORMAT, "%s: header: dimension with a leading "
                                             "zero in 'shape'", name);
                    if (d > ((size_t)-1 - (size_t)(s[i] - '0')) / 10)
                        return mirror__error(err, MIRROR_ERR_FORMAT, "%s: header: dimension too large in "
                                             "'shape'", name);
                    d = 10 * d + (size_t)(s[i] - '0');
                }
                if (!digits)
                    return mirror__error(err, MIRROR_ERR_FORMAT, "%s: header: 'shape' is not a tuple of "
                                         "integers", name);
                if (major <= 2 && i < n && s[i] == 'L') i++;
                if (ndim < MIRROR__NPY_MAX_DIMS) out->shape[ndim] = d;
                ndim++;
                if (!mirror__mul(count, d, &count))
                    return mirror__error(err, MIRROR_ERR_FORMAT, "%s: header: the element count of 'shape' "
                                         "overflows", name);
                comma = mirror__npy_eat(s, n, &i, ',');
                if (ndim == 1 && !comma)
                    return mirror__error(err, MIRROR_ERR_FORMAT, "%s: header: 'shape' (%zu) is not a tuple "
                                         "(a one-element tuple is (%zu,))", name, d, d);
            }
        }
        if (mirror__npy_eat(s, n, &i, ',')) continue;
        if (mirror__npy_eat(s, n, &i, '}')) break;
        return mirror__error(err, MIRROR_ERR_FORMAT, "%s: header: expected ',' or '}' at byte %zu", name, pre + i);
    }
    mirror__npy_space(s, n, &i);
    if (i != n)
        return mirror__error(err, MIRROR_ERR_FORMAT, "%s: header: unexpected text after the dict at byte %zu",
                             name, pre + i);
    for (k = 0; k < 3; k++)
        if (!seen[k]) return mirror__error(err, MIRROR_ERR_FORMAT, "%s: header lacks '%s'", name, keys[k]);

    /* What the dict says, checked against what this loader reads. */
    if (!strcmp(out->descr, "<f4"))
        out->dtype = MIRROR__NPY_F4, elem = 4;
    else if (!strcmp(out->descr, "<i4"))
        out->dtype = MIRROR__NPY_I4, elem = 4;
    else if (!strcmp(out->descr, "<i8"))
        out->dtype = MIRROR__NPY_I8, elem = 8;
    else if (!strcmp(out->descr, "|u1") || !strcmp(out->descr, "<u1"))
        out->dtype = MIRROR__NPY_U1, elem = 1;
    else
        return mirror__error(err, MIRROR_ERR_UNSUPPORTED, "%s: %sdtype '%s' is not supported (<f4, |u1, <i4 or "
                             "<i8)", name, out->descr[0] == '>' ? "big-endian " : "", out->descr);
    if (fortran)
        return mirror__error(err, MIRROR_ERR_UNSUPPORTED, "%s: fortran_order True is not supported (save a "
                             "C-ordered array)", name);
    if (ndim > MIRROR__NPY_MAX_DIMS)
        return mirror__error(err, MIRROR_ERR_UNSUPPORTED, "%s: %zu dimensions (at most %d)", name, ndim,
                             MIRROR__NPY_MAX_DIMS);
    if (!mirror__mul(count, elem, &bytes))
        return mirror__error(err, MIRROR_ERR_FORMAT, "%s: the data size of 'shape' overflows", name);
    rest = size - pre - hlen;
    if (bytes > rest)
        return mirror__error(err, MIRROR_ERR_FORMAT, "%s: truncated data: %zu of %zu bytes", name, rest, bytes);
    if (bytes < rest)
        return mirror__error(err, MIRROR_ERR_FORMAT, "%s: %zu trailing bytes after the data", name, rest - bytes);
    out->ndim = ndim;
    out->count = count;
    out->data = p + pre + hlen;
    return MIRROR_OK;
}

/* Element i of an integer array as a signed value. */
static long long mirror__npy_int(const mirror__npy *a, size_t i)
{
    if (a->dtype == MIRROR__NPY_U1) return a->data[i];
    if (a->dtype == MIRROR__NPY_I4) {
        uint32_t v = mirror__le32(a->data + 4 * i);
        return v >> 31 ? -(long long)(~v) - 1 : (long long)v;
    } else {
        uint64_t v = mirror__le64(a->data + 8 * i);
        return v >> 63 ? -(long long)(~v) - 1 : (long long)v;
    }
}

MIRROR_API int mirror_dataset_load_npy(mirror_dataset *ds, const char *x_path, const char *y_path,
                                       mirror_error *err)
{
    unsigned char *xb = NULL, *yb = NULL;
    size_t xs = 0, ys = 0, i, classes = 0;
    mirror__npy x, y;
    int rc;
    memset(&x, 0, sizeof x);
    memset(&y, 0, sizeof y);
    if (ds) memset(ds, 0, sizeof *ds);
    if (!ds || !x_path) return mirror__error(err, MIRROR_ERR_ARGUMENT, "mirror_dataset_load_npy: NULL argument");
    if ((rc = mirror__read_file(x_path, &xb, &xs, err)) != MIRROR_OK ||
        (rc = mirror__parse_npy(xb, xs, x_path, &x, err)) != MIRROR_OK)
        goto done;
    if (x.dtype != MIRROR__NPY_F4 && x.dtype != MIRROR__NPY_U1) {
        rc = mirror__error(err, MIRROR_ERR_UNSUPPORTED, "%s: dtype '%s' is not supported for x (<f4 or |u1)",
                           x_path, x.descr);
        goto done;
    }
    if (x.ndim < 2 || x.ndim > 4) {
        rc = mirror__error(err, MIRROR_ERR_FORMAT, "%s: %zu dimensions; x is (n, features), (n, height, width) "
                           "or (n, channels, height, width)", x_path, x.ndim);
        goto done;
    }
    if (!x.count) {
        rc = mirror__error(err, MIRROR_ERR_FORMAT, "%s: empty (a dimension of 'shape' is 0)", x_path);
        goto done;
    }
    if (y_path) {
        if ((rc = mirror__read_file(y_path, &yb, &ys, err)) != MIRROR_OK ||
            (rc = mirror__parse_npy(yb, ys, y_path, &y, err)) != MIRROR_OK)
            goto done;
        if (y.dtype != MIRROR__NPY_I4 && y.dtype != MIRROR__NPY_I8 && y.dtype != MIRROR__NPY_U1) {
            rc = mirror__error(err, MIRROR_ERR_UNSUPPORTED, "%s: dtype '%s' is not supported for labels (<i4, "
                               "<i8 or |u1)", y_path, y.descr);
            goto done;
        }
        if (y.ndim != 1) {
            rc = mirror__error(err, MIRROR_ERR_FORMAT, "%s: %zu dimensions; labels are (n,)", y_path, y.ndim);
            goto done;
        }
        if (y.shape[0] != x.shape[0]) {
            rc = mirror__error(err, MIRROR_ERR_FORMAT, "%s has %zu samples but %s has %zu labels", x_path,
                               x.shape[0], y_path, y.shape[0]);
            goto done;
        }
        for (i = 0; i < y.count; i++) {
            long long v = mirror__npy_int(&y, i);
            if (v < 0 || v > 65535) {
                rc = mirror__error(err, MIRROR_ERR_LABEL, "%s: label %lld of sample %zu %s", y_path, v, i,
                                   v < 0           ? "is negative"
                                   : v > INT32_MAX ? "does not fit int32"
                                                   : "is above 65535 (at most 65536 classes)");
                goto done;
            }
            if ((size_t)v >= classes) classes = (size_t)v + 1;
        }
    }
    ds->x = (float *)mirror__alloc(x.count, sizeof(float));
    ds->labels = y_path ? (int32_t *)mirror__alloc(x.shape[0], sizeof(int32_t)) : NULL;
    if (!ds->x || (y_path && !ds->labels)) {
        rc = mirror__error(err, MIRROR_ERR_NO_MEMORY, "%s: no memory for %zu samples", x_path, x.shape[0]);
        goto done;
    }
    if (x.dtype == MIRROR__NPY_U1)
        for (i = 0; i < x.count; i++) ds->x[i] = (float)x.data[i] * (1.0f / 255.0f);
    else
        for (i = 0; i < x.count; i++) {
            uint32_t bits = mirror__le32(x.data + 4 * i);
            memcpy(ds->x + i, &bits, sizeof bits);
        }
    if (y_path)
        for (i = 0; i < y.count; i++) ds->labels[i] = (int32_t)mirror__npy_int(&y, i);
    ds->count = x.shape[0];
    ds->channels = x.ndim == 4 ? x.shape[1] : x.ndim == 3 ? 1 : x.shape[1];
    ds->height = x.ndim == 2 ? 1 : x.shape[x.ndim - 2];
    ds->width = x.ndim == 2 ? 1 : x.shape[x.ndim - 1];
    ds->num_classes = classes;
done:
    MIRROR_FREE(xb);
    MIRROR_FREE(yb);
    if (rc) mirror_dataset_free(ds);
    return rc;
}
