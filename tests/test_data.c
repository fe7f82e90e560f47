/* test_data.c - the data layer: the IDX / MNIST loader on good and hostile
   files (every failure returns an error, leaves the dataset empty and frees
   everything), gzip through zlib or its absence, the synthetic digits, and
   the epoch order: permutations, batch counts and shards. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp, rmdir; mirror.h is not the first include */
#include "alloc_count.h"
#define MIRROR_IMPLEMENTATION
#include "../mirror.h"
#include "check.h"
#include "helpers.h"
#include "files.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef MIRROR_ZLIB
#include <zlib.h>
#endif

// >>files -------------------------------------------------------------------


static void put32(unsigned char *p, unsigned long v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/* An IDX3 image file of n images of h x w with pixel i = (37 i + salt) % 256;
   returns its size. */
static size_t make_images(unsigned char *buf, unsigned long n, unsigned long h, unsigned long w,
                          unsigned salt)
{
    size_t i, pixels = (size_t)n * h * w;
    buf[0] = 0, buf[1] = 0, buf[2] = 0x08, buf[3] = 3;
    put32(buf + 4, n);
    put32(buf + 8, h);
    put32(buf + 12, w);
    for (i = 0; i < pixels; i++) buf[16 + i] = (unsigned char)((37 * i + salt) % 256);
    return 16 + pixels;
}

/* An IDX1 label file of n labels. */
static size_t make_labels(unsigned char *buf, unsigned long n, const unsigned char *labels)
{
    buf[0] = 0, buf[1] = 0, buf[2] = 0x08, buf[3] = 1;
    put32(buf + 4, n);
    memcpy(buf + 8, labels, n);
    return 8 + n;
}

// >>the good pair ------------------------------------------------------------

#define NI 5 /* images of H x W */
#define H 4
#define W 3
#define IMG_HEADER 16
#define LAB_HEADER 8
static unsigned char good_img[IMG_HEADER + NI * H * W], good_lab[LAB_HEADER + NI];
static size_t good_img_size, good_lab_size;
static const unsigned char good_labels[NI] = {3, 0, 9, 1, 7};
static char img_path[256], lab_path[256];

static void make_good(void)
{
    good_img_size = make_images(good_img, NI, H, W, 11);
    good_img[IMG_HEADER] = 0;                          /* black */
    good_img[IMG_HEADER + NI * H * W - 1] = 255;       /* white */
    good_lab_size = make_labels(good_lab, NI, good_labels);
    path_in(img_path, "images");
    path_in(lab_path, "labels");
    write_file(img_path, good_img, good_img_size);
    write_file(lab_path, good_lab, good_lab_size);
}

/* ds holds the good pair (pixels from img, labels from lab, n images). */
static int holds(const mirror_dataset *ds, const unsigned char *img, const unsigned char *lab, size_t n,
                 size_t classes)
{
    size_t i;
    if (!ds->x || !ds->labels || ds->targets || ds->count != n || ds->channels != 1 || ds->height != H ||
        ds->width != W || ds->num_classes != classes || ds->target_dim != 0)
        return 0;
    for (i = 0; i < n * H * W; i++) {
        double want = img[IMG_HEADER + i] / 255.0;
        if (!(ds->x[i] >= 0.0f && ds->x[i] <= 1.0f) || fabs(ds->x[i] - want) > 1e-7) return 0;
    }
    for (i = 0; i < n; i++)
        if (ds->labels[i] != lab[LAB_HEADER + i]) return 0;
    return 1;
}

static int zeroed(const mirror_dataset *ds)
{
    return !ds->x && !ds->labels && !ds->targets && !ds->count && !ds->channels && !ds->height &&
           !ds->width && !ds->num_classes && !ds->target_dim;
}

static void test_good_load(void)
{
    mirror_dataset ds;
    mirror_error err = {0, ""};
    long live = live_allocs;
    int rc;
    memset(&ds, 0x5a, sizeof ds); /* garbage in: the loader must not read it */
    rc = mirror_dataset_load_idx(&ds, img_path, lab_path, 0, &err);
    CHECK(rc == MIRROR_OK, "load the good pair: %d %s", rc, err.message);
    CHECK(ds.count == NI && ds.channels == 1 && ds.height == H && ds.width == W,
          "5 images of 1x4x3 (got %zu of %zux%zux%zu)", ds.count, ds.channels, ds.height, ds.width);
    CHECK(ds.num_classes == 10, "num_classes 0 means 10 (got %zu)", ds.num_classes);
    CHECK(holds(&ds, good_img, good_lab, NI, 10), "pixels are byte/255 in [0,1], labels as written");
    CHECK(ds.x && ds.x[0] == 0.0f && ds.x[NI * H * W - 1] == 1.0f, "byte 0 is 0.0 and byte 255 is exactly 1.0");
    CHECK(ds.x && ds.x[7] == (float)good_img[IMG_HEADER + 7] * (1.0f / 255.0f), "pixel 7 is byte/255");
    CHECK(ds.targets == NULL && ds.target_dim == 0, "no targets");
    mirror_dataset_free(&ds);
    CHECK(zeroed(&ds), "mirror_dataset_free zeroes the dataset");
    CHECK(live_allocs == live, "free released the load's allocations (%ld left)", live_allocs - live);

    rc = mirror_dataset_load_idx(&ds, img_path, lab_path, 12, NULL);
    CHECK(rc == MIRROR_OK && ds.num_classes == 12 && holds(&ds, good_img, good_lab, NI, 12),
          "num_classes 12 is kept; err may be NULL");
    mirror_dataset_free(&ds);
    mirror_dataset_free(&ds);
    CHECK(zeroed(&ds), "freeing a freed (zeroed) dataset is harmless");
    mirror_dataset_free(NULL);
}

// >>hostile files -------------------------------------------------------------

/* The load of (img, lab) must fail with want (0: any error), fill err, leave
   ds empty and free everything; mention, when given, appears in the message. */
static void expect_fail(const char *what, const char *img, const char *lab, size_t classes, int want,
                        const char *mention)
{
    mirror_dataset ds;
    mirror_error err = {0, ""};
    long live = live_allocs;
    int rc;
    memset(&ds, 0x5a, sizeof ds);
    rc = mirror_dataset_load_idx(&ds, img, lab, classes, &err);
    CHECK(rc < 0 && (want == 0 || rc == want), "%s: got %d (%s), want %s", what, rc, mirror_result_string(rc),
          want ? mirror_result_string(want) : "an error");
    CHECK(err.code == rc && err.message[0] != '\0', "%s: err gets the code and a message (%d, \"%s\")", what,
          err.code, err.message);
    if (mention)
        CHECK(strstr(err.message, mention) != NULL, "%s: the message \"%s\" names %s", what, err.message,
              mention);
    CHECK(zeroed(&ds), "%s: the dataset is left empty", what);
    if (rc == MIRROR_OK) mirror_dataset_free(&ds); /* a wrong success: free it, leak-check the rest */
    CHECK(live_allocs == live, "%s: %ld allocations leaked", what, live_allocs - live);
}

/* Writes bytes to root/name and expects the load with the other good file
   to fail; images selects which file of the pair is replaced. */
static void hostile(const char *what, int images, const unsigned char *bytes, size_t n, size_t classes,
                    int want)
{
    char p[256];
    path_in(p, images ? "bad-images" : "bad-labels");
    write_file(p, bytes, n);
    expect_fail(what, images ? p : img_path, images ? lab_path : p, classes, want, NULL);
}

static void test_truncated(void)
{
    char p[256], what[96];
    size_t len;
    path_in(p, "trunc-images");
    for (len = 0; len < good_img_size; len++) { /* every header byte and every data byte */
        write_file(p, good_img, len);
        snprintf(what, sizeof what, "images truncated to %zu of %zu bytes", len, good_img_size);
        expect_fail(what, p, lab_path, 10, MIRROR_ERR_FORMAT, p);
    }
    path_in(p, "trunc-labels");
    for (len = 0; len < good_lab_size; len++) {
        write_file(p, good_lab, len);
        snprintf(what, sizeof what, "labels truncated to %zu of %zu bytes", len, good_lab_size);
        expect_fail(what, img_path, p, 10, MIRROR_ERR_FORMAT, p);
    }
}

static void test_bad_headers(void)
{
    unsigned char img[sizeof good_img + 64], lab[sizeof good_lab + 64];
    static const unsigned char types[] = {0x09, 0x0B, 0x0C, 0x0D, 0x0E, 0x00, 0xFF};
    static const unsigned char img_dims[] = {0, 1, 2, 4, 255};
    static const unsigned char lab_dims[] = {0, 2, 3, 255};
    size_t i;
    char what[96];

    for (i = 0; i < 2; i++) {
        memcpy(img, good_img, good_img_size);
        img[i] = 0x01;
        snprintf(what, sizeof what, "images: magic byte %zu is 0x01", i);
        hostile(what, 1, img, good_img_size, 10, MIRROR_ERR_FORMAT);
        memcpy(lab, good_lab, good_lab_size);
        lab[i] = 0x80;
        snprintf(what, sizeof what, "labels: magic byte %zu is 0x80", i);
        hostile(what, 0, lab, good_lab_size, 10, MIRROR_ERR_FORMAT);
    }
    for (i = 0; i < sizeof types; i++) {
        memcpy(img, good_img, good_img_size);
        img[2] = types[i];
        snprintf(what, sizeof what, "images: element type 0x%02x", types[i]);
        hostile(what, 1, img, good_img_size, 10, MIRROR_ERR_FORMAT);
        memcpy(lab, good_lab, good_lab_size);
        lab[2] = types[i];
        snprintf(what, sizeof what, "labels: element type 0x%02x", types[i]);
        hostile(what, 0, lab, good_lab_size, 10, MIRROR_ERR_FORMAT);
    }
    for (i = 0; i < sizeof img_dims; i++) {
        memcpy(img, good_img, good_img_size);
        img[3] = img_dims[i];
        snprintf(what, sizeof what, "images: %u dimensions", img_dims[i]);
        hostile(what, 1, img, good_img_size, 10, MIRROR_ERR_FORMAT);
    }
    for (i = 0; i < sizeof lab_dims; i++) {
        memcpy(lab, good_lab, good_lab_size);
        lab[3] = lab_dims[i];
        snprintf(what, sizeof what, "labels: %u dimensions", lab_dims[i]);
        hostile(what, 0, lab, good_lab_size, 10, MIRROR_ERR_FORMAT);
    }
    expect_fail("the pair swapped (labels as images)", lab_path, img_path, 10, MIRROR_ERR_FORMAT, NULL);
    expect_fail("images given as both files", img_path, img_path, 10, MIRROR_ERR_FORMAT, NULL);

    /* Dimensions: a product that overflows size_t, one that does not but
       is far larger than the file, and zero sizes. */
    memcpy(img, good_img, good_img_size);
    put32(img + 4, 0xFFFFFFFFul), put32(img + 8, 0xFFFFFFFFul), put32(img + 12, 0xFFFFFFFFul);
    hostile("images: 0xFFFFFFFF^3 (the product overflows size_t)", 1, img, good_img_size, 10, MIRROR_ERR_FORMAT);
    put32(img + 4, 5), put32(img + 8, 0xFFFFFFFFul), put32(img + 12, 0xFFFFFFFFul);
    hostile("images: 5 x 0xFFFFFFFF x 0xFFFFFFFF", 1, img, good_img_size, 10, MIRROR_ERR_FORMAT);
    put32(img + 4, 0x10000ul), put32(img + 8, 0x10000ul), put32(img + 12, 0x10000ul);
    hostile("images: 65536^3 bytes claimed, 60 present", 1, img, good_img_size, 10, MIRROR_ERR_FORMAT);
    memcpy(lab, good_lab, good_lab_size);
    put32(lab + 4, 0xFFFFFFFFul);
    hostile("labels: 0xFFFFFFFF labels claimed", 0, lab, good_lab_size, 10, MIRROR_ERR_FORMAT);

    /* Counts that differ. */
    hostile("4 labels for 5 images", 0, lab, make_labels(lab, 4, good_labels), 10, MIRROR_ERR_FORMAT);
    {
        static const unsigned char six[6] = {1, 2, 3, 4, 5, 6};
        hostile("6 labels for 5 images", 0, lab, make_labels(lab, 6, six), 10, MIRROR_ERR_FORMAT);
    }
    hostile("6 images for 5 labels", 1, img, make_images(img, 6, H, W, 1), 10, MIRROR_ERR_FORMAT);

    /* Zero images, zero height, zero width. */
    {
        char zi[256], zl[256];
        path_in(zi, "zero-images");
        path_in(zl, "zero-labels");
        write_file(zi, img, make_images(img, 0, H, W, 0));
        write_file(zl, lab, make_labels(lab, 0, good_labels));
        expect_fail("zero images and zero labels", zi, zl, 10, MIRROR_ERR_FORMAT, NULL);
        write_file(zi, img, make_images(img, NI, 0, W, 0));
        expect_fail("5 images of height 0", zi, lab_path, 10, MIRROR_ERR_FORMAT, NULL);
        write_file(zi, img, make_images(img, NI, H, 0, 0));
        expect_fail("5 images of width 0", zi, lab_path, 10, MIRROR_ERR_FORMAT, NULL);
    }

    /* Trailing bytes. */
    memcpy(img, good_img, good_img_size);
    img[good_img_size] = 0;
    hostile("images: one trailing byte", 1, img, good_img_size + 1, 10, MIRROR_ERR_FORMAT);
    memcpy(lab, good_lab, good_lab_size);
    memset(lab + good_lab_size, 0, 16);
    hostile("labels: 16 trailing bytes", 0, lab, good_lab_size + 16, 10, MIRROR_ERR_FORMAT);
}

static void test_labels_and_arguments(void)
{
    unsigned char lab[LAB_HEADER + NI];
    unsigned char ys[NI];
    char p[256];
    mirror_dataset ds;
    mirror_error err = {0, ""};
    long live;
    int rc;

    memcpy(ys, good_labels, NI);
    ys[4] = 10;
    hostile("label 10 with 10 classes", 0, lab, make_labels(lab, NI, ys), 0, MIRROR_ERR_LABEL);
    ys[4] = 255;
    hostile("label 255 with 10 classes", 0, lab, make_labels(lab, NI, ys), 10, MIRROR_ERR_LABEL);
    hostile("label 9 with 9 classes", 0, good_lab, good_lab_size, 9, MIRROR_ERR_LABEL);
    ys[4] = 0;
    ys[0] = 3;
    hostile("label 3 with 3 classes", 0, lab, make_labels(lab, NI, ys), 3, MIRROR_ERR_LABEL);

    /* The largest class count takes the largest byte. */
    ys[0] = 255;
    path_in(p, "labels-255");
    write_file(p, lab, make_labels(lab, NI, ys));
    rc = mirror_dataset_load_idx(&ds, img_path, p, 256, &err);
    CHECK(rc == MIRROR_OK && ds.num_classes == 256 && ds.labels && ds.labels[0] == 255,
          "label 255 with 256 classes loads: %s", err.message);
    mirror_dataset_free(&ds);
    expect_fail("257 classes", img_path, p, 257, MIRROR_ERR_ARGUMENT, NULL);

    /* Missing files and directories in place of files. */
    path_in(p, "no-such-file");
    expect_fail("missing image file", p, lab_path, 10, MIRROR_ERR_IO, p);
    expect_fail("missing label file", img_path, p, 10, MIRROR_ERR_IO, p);
    path_in(p, "a-directory");
    mkdir(p, 0700);
    expect_fail("a directory as the image file", p, lab_path, 10, 0, NULL);
    expect_fail("a directory as the label file", img_path, p, 10, 0, NULL);
    expect_fail("a directory as both files", p, p, 10, 0, NULL);

    /* NULL arguments: an error, not a crash; a dataset given is left empty. */
    live = live_allocs;
    CHECK(mirror_dataset_load_idx(NULL, img_path, lab_path, 10, &err) == MIRROR_ERR_ARGUMENT,
          "NULL dataset is an argument error");
    memset(&ds, 0x5a, sizeof ds);
    CHECK(mirror_dataset_load_idx(&ds, NULL, lab_path, 10, &err) == MIRROR_ERR_ARGUMENT && err.message[0],
          "NULL image path is an argument error");
    CHECK(zeroed(&ds), "NULL image path: the dataset is left empty (\"On error ds is left empty\")");
    memset(&ds, 0x5a, sizeof ds);
    CHECK(mirror_dataset_load_idx(&ds, img_path, NULL, 10, NULL) == MIRROR_ERR_ARGUMENT,
          "NULL label path is an argument error (err NULL)");
    CHECK(zeroed(&ds), "NULL label path: the dataset is left empty");
    CHECK(live_allocs == live, "NULL arguments allocate nothing");
}

// >>MNIST directories ---------------------------------------------------------

static const char *const mnist_names[4] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                                           "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"};
/* The test split: 3 images of H x W and their labels. */
static unsigned char test_img[IMG_HEADER + 3 * H * W], test_lab[LAB_HEADER + 3];
static size_t test_img_size, test_lab_size;

/* root/sub/name into out. */
static const char *sub_path(char *out, const char *sub, const char *name)
{
    snprintf(out, 256, "%s/%s/%s", root, sub, name);
    return out;
}

/* The four files of the good pairs into root/sub, plain; which: bit i set
   writes file i (mnist_names order). */
static void write_mnist(const char *sub, unsigned which)
{
    char p[256];
    const unsigned char *data[4];
    size_t size[4], i;
    data[0] = good_img, size[0] = good_img_size, data[1] = good_lab, size[1] = good_lab_size;
    data[2] = test_img, size[2] = test_img_size, data[3] = test_lab, size[3] = test_lab_size;
    path_in(p, sub);
    mkdir(p, 0700);
    for (i = 0; i < 4; i++)
        if (which >> i & 1) write_file(sub_path(p, sub, mnist_names[i]), data[i], size[i]);
}

/* load_mnist on root/sub must fail: both outputs empty, nothing leaked,
   and the message must hold `says` (when not NULL). */
static void expect_mnist_fail(const char *what, const char *dir, int want, const char *says)
{
    mirror_dataset train, test;
    mirror_error err = {0, ""};
    long live = live_allocs;
    int rc;
    memset(&train, 0x5a, sizeof train);
    memset(&test, 0x5a, sizeof test);
    rc = mirror_dataset_load_mnist(&train, &test, dir, &err);
    CHECK(rc < 0 && (want == 0 || rc == want), "%s: got %d (%s), want %s", what, rc, mirror_result_string(rc),
          want ? mirror_result_string(want) : "an error");
    CHECK(err.code == rc && err.message[0], "%s: err gets the code and a message", what);
    CHECK(!says || strstr(err.message, says), "%s: the message says \"%s\": %s", what, says ? says : "", err.message);
    CHECK(zeroed(&train), "%s: the train set is left empty", what);
    CHECK(zeroed(&test), "%s: the test set is left empty", what);
    CHECK(live_allocs == live, "%s: %ld allocations leaked", what, live_allocs - live);
}

static void test_mnist(void)
{
    static const unsigned char ys[3] = {2, 8, 5};
    mirror_dataset train, test;
    mirror_error err = {0, ""};
    char dir[256], p[256], longdir[1100];
    long live = live_allocs;
    int rc;

    test_img_size = make_images(test_img, 3, H, W, 101);
    test_lab_size = make_labels(test_lab, 3, ys);
    write_mnist("mnist", 15);
    path_in(dir, "mnist");
    memset(&train, 0x5a, sizeof train);
    memset(&test, 0x5a, sizeof test);
    rc = mirror_dataset_load_mnist(&train, &test, dir, &err);
    CHECK(rc == MIRROR_OK, "load_mnist on a directory of the four plain files: %s", err.message);
    CHECK(holds(&train, good_img, good_lab, NI, 10), "train split: 5 images and their labels");
    CHECK(holds(&test, test_img, test_lab, 3, 10), "test split: 3 images and their labels");
    mirror_dataset_free(&train);
    mirror_dataset_free(&test);

    CHECK(mirror_dataset_load_mnist(&train, NULL, dir, &err) == MIRROR_OK &&
              holds(&train, good_img, good_lab, NI, 10),
          "train only (test NULL)");
    mirror_dataset_free(&train);
    CHECK(mirror_dataset_load_mnist(NULL, &test, dir, &err) == MIRROR_OK && holds(&test, test_img, test_lab, 3, 10),
          "test only (train NULL)");
    mirror_dataset_free(&test);
    CHECK(live_allocs == live, "the loads were all freed");

    CHECK(mirror_dataset_load_mnist(NULL, NULL, dir, &err) == MIRROR_ERR_ARGUMENT && err.message[0],
          "both outputs NULL is an argument error");
    CHECK(mirror_dataset_load_mnist(&train, &test, NULL, &err) == MIRROR_ERR_ARGUMENT, "NULL directory");
    memset(longdir, 'a', sizeof longdir - 1);
    longdir[0] = '/';
    longdir[sizeof longdir - 1] = '\0';
    expect_mnist_fail("a 1099-character directory name", longdir, MIRROR_ERR_ARGUMENT, "too long");

    path_in(p, "no-such-dir");
    expect_mnist_fail("a missing directory", p, MIRROR_ERR_IO, "cannot open the directory");
    write_mnist("mnist-no-test", 3);
    path_in(p, "mnist-no-test");
    expect_mnist_fail("train files only (the test split is missing)", p, MIRROR_ERR_IO,
                      "neither t10k-images-idx3-ubyte nor t10k-images-idx3-ubyte.gz");
    write_mnist("mnist-no-train-labels", 13);
    path_in(p, "mnist-no-train-labels");
    expect_mnist_fail("the train labels are missing", p, MIRROR_ERR_IO, "train-labels-idx1-ubyte.gz is there");
    write_mnist("mnist-bad-test", 7);
    write_file(sub_path(p, "mnist-bad-test", mnist_names[3]), good_lab, good_lab_size); /* 5 labels, 3 images */
    path_in(p, "mnist-bad-test");
    expect_mnist_fail("test labels do not match the test images", p, MIRROR_ERR_FORMAT, NULL);
    expect_mnist_fail("an empty directory name (not the root directory)", "", MIRROR_ERR_ARGUMENT, "empty directory name");
    expect_mnist_fail("a file given as the directory", sub_path(p, "mnist", mnist_names[0]), MIRROR_ERR_IO,
                      "not a directory");
    /* A plain file that cannot be read is reported as itself, not as a
       missing .gz beside it: a directory in its place (any user), and a file
       without read permission (a user other than root). */
    write_mnist("mnist-unreadable", 15);
    sub_path(p, "mnist-unreadable", mnist_names[1]);
    remove(p);
    mkdir(p, 0700);
    path_in(p, "mnist-unreadable");
    expect_mnist_fail("a directory in place of the train labels", p, MIRROR_ERR_IO,
                      "train-labels-idx1-ubyte: not a regular file but a directory");
    if (geteuid() != 0) {
        write_mnist("mnist-no-permission", 15);
        chmod(sub_path(p, "mnist-no-permission", mnist_names[2]), 0);
        path_in(p, "mnist-no-permission");
        expect_mnist_fail("test images without read permission", p, MIRROR_ERR_IO,
                          "t10k-images-idx3-ubyte: cannot open: Permission denied");
    }
    CHECK(live_allocs == live, "failed MNIST loads leaked nothing");
}

// >>gzip ------------------------------------------------------------------------

/* gzip of good_lab (mtime 0), made by Python's gzip.compress: the same bytes
   in builds with and without zlib. */
static const unsigned char good_lab_gz[] = {
    0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x03, 0x63, 0x60, 0xe0, 0x60, 0x64, 0x60, 0x60,
    0x60, 0x65, 0x66, 0xe0, 0x64, 0x64, 0x07, 0x00, 0xf7, 0xb8, 0xb6, 0xc5, 0x0d, 0x00, 0x00, 0x00};

#ifdef MIRROR_ZLIB
/* The whole of a file (at most cap bytes); returns its size. */
static size_t read_all(const char *path, unsigned char *buf, size_t cap)
{
    FILE *f = fopen(path, "rb");
    size_t n;
    if (!f) return 0;
    n = fread(buf, 1, cap, f);
    fclose(f);
    return n;
}

static void test_gzip(void)
{
    const unsigned char *data[4];
    size_t size[4], i, gz_size;
    char dir[256], p[256], q[256];
    unsigned char gz[512], bad[512];
    mirror_dataset train, test, plain, zipped;
    mirror_error err = {0, ""};
    long live = live_allocs;
    int rc;

    data[0] = good_img, size[0] = good_img_size, data[1] = good_lab, size[1] = good_lab_size;
    data[2] = test_img, size[2] = test_img_size, data[3] = test_lab, size[3] = test_lab_size;
    path_in(dir, "gz");
    mkdir(dir, 0700);
    for (i = 0; i < 4; i++) {
        char name[64];
        snprintf(name, sizeof name, "%s.gz", mnist_names[i]);
        CHECK(write_gz(sub_path(p, "gz", name), data[i], size[i]), "zlib writes %s", name);
    }
    memset(&train, 0x5a, sizeof train);
    memset(&test, 0x5a, sizeof test);
    rc = mirror_dataset_load_mnist(&train, &test, dir, &err);
    CHECK(rc == MIRROR_OK, "load_mnist on a directory of four .gz files: %s", err.message);
    CHECK(holds(&train, good_img, good_lab, NI, 10), "gzip train split equals the plain data");
    CHECK(holds(&test, test_img, test_lab, 3, 10), "gzip test split equals the plain data");
    mirror_dataset_free(&train);
    mirror_dataset_free(&test);

    /* The same data through load_idx: gzip and plain give bitwise equal sets. */
    CHECK(mirror_dataset_load_idx(&plain, img_path, lab_path, 10, &err) == MIRROR_OK, "plain load");
    CHECK(mirror_dataset_load_idx(&zipped, sub_path(p, "gz", "train-images-idx3-ubyte.gz"),
                                  sub_path(q, "gz", "train-labels-idx1-ubyte.gz"), 10, &err) == MIRROR_OK,
          "gzip load through load_idx: %s", err.message);
    CHECK(plain.x && zipped.x && !memcmp(plain.x, zipped.x, NI * H * W * sizeof(float)) &&
              !memcmp(plain.labels, zipped.labels, NI * sizeof(int32_t)),
          "gzip and plain loads are bitwise equal");
    mirror_dataset_free(&plain);
    mirror_dataset_free(&zipped);

    /* A gzip made elsewhere (Python) reads too. */
    path_in(p, "python-labels.gz");
    write_file(p, good_lab_gz, sizeof good_lab_gz);
    rc = mirror_dataset_load_idx(&zipped, img_path, p, 10, &err);
    CHECK(rc == MIRROR_OK && holds(&zipped, good_img, good_lab, NI, 10), "a gzip from Python's gzip module: %s",
          err.message);
    mirror_dataset_free(&zipped);
    CHECK(live_allocs == live, "gzip loads freed everything");

    /* Corrupted streams. */
    gz_size = read_all(sub_path(p, "gz", "train-images-idx3-ubyte.gz"), gz, sizeof gz);
    CHECK(gz_size > 30, "the gzip image file has %zu bytes", gz_size);
    path_in(p, "bad-images.gz");
    for (i = 12; i + 8 < gz_size; i += 3) { /* a flipped byte anywhere in the deflate data */
        char what[96];
        memcpy(bad, gz, gz_size);
        bad[i] ^= 0x55;
        write_file(p, bad, gz_size);
        snprintf(what, sizeof what, "gzip images with byte %zu of %zu flipped", i, gz_size);
        expect_fail(what, p, lab_path, 10, 0, NULL);
    }
    memcpy(bad, gz, gz_size);
    bad[gz_size - 8] ^= 0x01; /* the CRC-32 of the trailer */
    write_file(p, bad, gz_size);
    expect_fail("gzip images with a wrong CRC-32", p, lab_path, 10, 0, NULL);
    memcpy(bad, gz, gz_size);
    bad[gz_size - 4] ^= 0x01; /* ISIZE */
    write_file(p, bad, gz_size);
    expect_fail("gzip images with a wrong length in the trailer", p, lab_path, 10, 0, NULL);
    write_file(p, gz, gz_size / 2);
    expect_fail("gzip images cut in half", p, lab_path, 10, 0, NULL);
    write_file(p, gz, gz_size - 8);
    expect_fail("gzip images without their 8-byte trailer (CRC and length)", p, lab_path, 10, 0, NULL);
    write_file(p, gz, gz_size - 1);
    expect_fail("gzip images missing their last byte", p, lab_path, 10, 0, NULL);
    memcpy(bad, gz, 10);
    memset(bad + 10, 0xEE, 40);
    write_file(p, bad, 50);
    expect_fail("a gzip header followed by garbage", p, lab_path, 10, 0, NULL);
    write_file(p, gz, 10);
    expect_fail("a gzip header alone", p, lab_path, 10, 0, NULL);

    /* A corrupted file inside an MNIST directory. */
    write_mnist("gz-bad", 14);
    memcpy(bad, gz, gz_size);
    bad[gz_size / 2] ^= 0xFF;
    write_file(sub_path(p, "gz-bad", "train-images-idx3-ubyte.gz"), bad, gz_size);
    path_in(p, "gz-bad");
    expect_mnist_fail("load_mnist with a corrupted train-images .gz", p, 0, NULL);
    CHECK(live_allocs == live, "corrupted gzip loads leaked nothing");
}
#else
static void test_gzip(void)
{
    char p[256], dir[256];
    mirror_error err = {0, ""};
    mirror_dataset ds;
    size_t i;
    long live = live_allocs;

    path_in(p, "python-labels.gz");
    write_file(p, good_lab_gz, sizeof good_lab_gz);
    expect_fail("a gzip label file without zlib", img_path, p, 10, MIRROR_ERR_UNSUPPORTED, "zlib");
    expect_fail("a gzip image file without zlib", p, lab_path, 10, MIRROR_ERR_UNSUPPORTED, "zlib");
    memset(&ds, 0, sizeof ds);
    CHECK(mirror_dataset_load_idx(&ds, img_path, p, 10, &err) == MIRROR_ERR_UNSUPPORTED &&
              strstr(err.message, "zlib") && strstr(err.message, p),
          "the message names the file and zlib: \"%s\"", err.message);

    /* A directory holding only .gz files. */
    path_in(dir, "gz");
    mkdir(dir, 0700);
    for (i = 0; i < 4; i++) {
        char name[64];
        snprintf(name, sizeof name, "%s.gz", mnist_names[i]);
        write_file(sub_path(p, "gz", name), good_lab_gz, sizeof good_lab_gz);
    }
    expect_mnist_fail("load_mnist on .gz files without zlib", dir, MIRROR_ERR_UNSUPPORTED, "zlib");
    memset(&err, 0, sizeof err);
    mirror_dataset_load_mnist(&ds, NULL, dir, &err);
    CHECK(strstr(err.message, "zlib") != NULL, "load_mnist's message names zlib: \"%s\"", err.message);
    CHECK(live_allocs == live, "unsupported gzip loads leaked nothing");
}
#endif

// >>synthetic digits -------------------------------------------------------------

static void test_synthetic(void)
{
    enum { N = 100, PIX = 28 * 28 };
    mirror_dataset a, b, c;
    mirror_error err = {0, ""};
    size_t i, j, k, per_class[10] = {0}, out_of_range = 0;
    double mean[10][PIX], min_distance = 1e9;
    long live = live_allocs;
    int rc;

    memset(&c, 0x5a, sizeof c);
    rc = mirror_dataset_synthetic_digits(&c, 0, 1, &err);
    CHECK(rc == MIRROR_ERR_ARGUMENT && err.code == rc && err.message[0], "count 0 is an argument error (%d)", rc);
    CHECK(zeroed(&c), "count 0: the dataset is left empty");
    CHECK(mirror_dataset_synthetic_digits(NULL, 10, 1, &err) == MIRROR_ERR_ARGUMENT, "NULL dataset");
    rc = mirror_dataset_synthetic_digits(&c, 30000000, 1, &err);
    CHECK(rc == MIRROR_ERR_ARGUMENT && strstr(err.message, "30000000") && strstr(err.message, "1 to 16777216") &&
              zeroed(&c),
          "count 30000000: an argument error that gives the limit (%s)", err.message);
    rc = mirror_dataset_synthetic_digits(&c, 0, 1, &err);
    CHECK(rc == MIRROR_ERR_ARGUMENT && strstr(err.message, "1 to 16777216"), "count 0: gives the range too (%s)",
          err.message);
    CHECK(live_allocs == live, "failed synthetic calls allocate nothing");

    CHECK(mirror_dataset_synthetic_digits(&a, N, 42, &err) == MIRROR_OK, "100 digits, seed 42: %s", err.message);
    CHECK(mirror_dataset_synthetic_digits(&b, N, 42, &err) == MIRROR_OK, "again with seed 42");
    CHECK(mirror_dataset_synthetic_digits(&c, N, 43, &err) == MIRROR_OK, "seed 43");
    if (!a.x || !b.x || !c.x) return;
    CHECK(a.count == N && a.channels == 1 && a.height == 28 && a.width == 28 && a.num_classes == 10 &&
              a.targets == NULL,
          "shape 1x28x28, 10 classes, %zu samples", a.count);
    CHECK(!memcmp(a.x, b.x, N * PIX * sizeof(float)) && !memcmp(a.labels, b.labels, N * sizeof(int32_t)),
          "the same seed gives bitwise equal data");
    CHECK(memcmp(a.x, c.x, N * PIX * sizeof(float)) != 0, "another seed gives other images");
    for (i = 0; i < N * PIX; i++) out_of_range += !(a.x[i] >= 0.0f && a.x[i] <= 1.0f);
    CHECK(out_of_range == 0, "every value in [0,1] (%zu outside)", out_of_range);
    for (i = 0; i < N; i++)
        if (a.labels[i] >= 0 && a.labels[i] < 10) per_class[a.labels[i]]++;
    for (k = 0; k < 10; k++) CHECK(per_class[k] == N / 10, "class %zu has %zu of 100 samples", k, per_class[k]);
    CHECK(memcmp(a.x, a.x + 10 * PIX, PIX * sizeof(float)) != 0, "two samples of one class differ");

    /* Class means: pairwise distinct (RMS difference over the pixels). */
    memset(mean, 0, sizeof mean);
    for (i = 0; i < N; i++)
        for (j = 0; j < PIX; j++) mean[a.labels[i]][j] += a.x[i * PIX + j] / (double)(N / 10);
    for (k = 0; k < 10; k++) {
        size_t l;
        for (l = k + 1; l < 10; l++) {
            double d = 0.0;
            for (j = 0; j < PIX; j++) d += (mean[k][j] - mean[l][j]) * (mean[k][j] - mean[l][j]);
            d = sqrt(d / PIX);
            if (d < min_distance) min_distance = d;
        }
    }
    CHECK(min_distance > 0.03, "the ten class means are pairwise distinct (smallest RMS distance %.4f)",
          min_distance);
    mirror_dataset_free(&a);
    mirror_dataset_free(&b);
    mirror_dataset_free(&c);

    /* 25 samples: the classes take 3 or 2 each, cycling. */
    CHECK(mirror_dataset_synthetic_digits(&a, 25, 0, &err) == MIRROR_OK, "25 digits, seed 0");
    memset(per_class, 0, sizeof per_class);
    for (i = 0; a.labels && i < 25; i++)
        if (a.labels[i] >= 0 && a.labels[i] < 10) per_class[a.labels[i]]++;
    for (k = 0; k < 10; k++)
        CHECK(per_class[k] == (k < 5 ? 3u : 2u), "25 samples: class %zu has %zu", k, per_class[k]);
    mirror_dataset_free(&a);
    CHECK(live_allocs == live, "synthetic datasets freed");
}

// >>epoch order -------------------------------------------------------------------

/* perm is a permutation of [0, n). */
static int is_permutation(const size_t *perm, size_t n)
{
    unsigned char *seen = (unsigned char *)calloc(n ? n : 1, 1);
    size_t i;
    int ok = seen != NULL;
    for (i = 0; ok && i < n; i++) {
        if (perm[i] >= n || seen[perm[i]]) ok = 0;
        else seen[perm[i]] = 1;
    }
    free(seen);
    return ok;
}

static void test_permutation(void)
{
    static const size_t sizes[] = {0, 1, 2, 17, 1000};
    size_t si, *p = (size_t *)malloc(1000 * sizeof(size_t)), *q = (size_t *)malloc(1000 * sizeof(size_t));
    size_t i, identity;
    for (si = 0; si < sizeof sizes / sizeof *sizes; si++) {
        size_t n = sizes[si];
        CHECK(mirror_permutation(p, n, 7, 3) == MIRROR_OK && is_permutation(p, n),
              "n=%zu: each index exactly once", n);
        CHECK(mirror_permutation(q, n, 7, 3) == MIRROR_OK && !memcmp(p, q, n * sizeof(size_t)),
              "n=%zu: equal for equal (seed, epoch)", n);
        if (n >= 17) {
            mirror_permutation(q, n, 7, 4);
            CHECK(is_permutation(q, n) && memcmp(p, q, n * sizeof(size_t)) != 0, "n=%zu: epoch 4 differs from 3", n);
            mirror_permutation(q, n, 8, 3);
            CHECK(is_permutation(q, n) && memcmp(p, q, n * sizeof(size_t)) != 0, "n=%zu: seed 8 differs from 7", n);
            mirror_permutation(q, n, 0, 0);
            CHECK(is_permutation(q, n) && memcmp(p, q, n * sizeof(size_t)) != 0, "n=%zu: seed 0 epoch 0 differs", n);
            for (identity = 0, i = 0; i < n; i++) identity += q[i] == i;
            CHECK(identity < n / 2, "n=%zu: seed 0 shuffles (%zu fixed points)", n, identity);
        }
    }
    CHECK(mirror_permutation(p, 1, 0, 0) == MIRROR_OK && p[0] == 0, "n=1 gives {0}");
    CHECK(mirror_permutation(NULL, 0, 1, 1) == MIRROR_OK, "NULL perm with n=0 is fine");
    CHECK(mirror_permutation(NULL, 5, 1, 1) == MIRROR_ERR_ARGUMENT, "NULL perm with n=5 is an error");
    {
        /* Consecutive epochs and seeds give different orders of 17. */
        size_t e, distinct = 0;
        mirror_permutation(q, 17, 1, 0);
        for (e = 1; e <= 20; e++) {
            mirror_permutation(p, 17, 1, e);
            distinct += memcmp(p, q, 17 * sizeof(size_t)) != 0;
            memcpy(q, p, 17 * sizeof(size_t));
        }
        CHECK(distinct == 20, "epochs 0..20 of seed 1: every epoch differs from the previous (%zu of 20)", distinct);
    }
    free(p);
    free(q);

    CHECK(mirror_num_batches(50, 7, 0) == 8, "50 samples, batch 7: 8 batches with the remainder");
    CHECK(mirror_num_batches(50, 7, 1) == 7, "50 samples, batch 7, drop_remainder: 7 batches");
    CHECK(mirror_num_batches(49, 7, 0) == 7 && mirror_num_batches(49, 7, 1) == 7, "49 of 7: 7 either way");
    CHECK(mirror_num_batches(6, 7, 0) == 1 && mirror_num_batches(6, 7, 1) == 0, "6 of 7: 1, or 0 dropped");
    CHECK(mirror_num_batches(0, 7, 0) == 0 && mirror_num_batches(0, 7, 1) == 0, "no samples: no batches");
    CHECK(mirror_num_batches(5, 0, 0) == 0 && mirror_num_batches(5, 0, 1) == 0, "batch 0: no batches");
    CHECK(mirror_num_batches(1, 1, 0) == 1 && mirror_num_batches(1, 1, 1) == 1, "1 of 1");
    CHECK(mirror_num_batches((size_t)-1, 2, 0) == (size_t)1 << (sizeof(size_t) * 8 - 1),
          "SIZE_MAX samples in batches of 2 does not overflow (got %zu)", mirror_num_batches((size_t)-1, 2, 0));
}

static void test_shard(void)
{
    size_t n, R, r, begin, count, bad = 0, cases = 0;
    for (n = 0; n <= 40; n++)
        for (R = 1; R <= 7; R++) {
            size_t next = 0, lo = (size_t)-1, hi = 0, prev = (size_t)-1;
            int ok = 1;
            for (r = 0; r < R; r++) {
                mirror_shard(n, R, r, &begin, &count);
                if (begin != next) ok = 0;               /* contiguous, in order */
                if (count > prev) ok = 0;                /* early replicas take the extra */
                if (n < R && r >= n && count != 0) ok = 0; /* empty shards */
                next = begin + count;
                prev = count;
                if (count < lo) lo = count;
                if (count > hi) hi = count;
            }
            if (next != n || hi - lo > 1) ok = 0; /* covers [0, n) exactly; sizes within one */
            if (!ok) {
                bad++;
                fprintf(stderr, "mirror_shard(n=%zu, replicas=%zu) is wrong\n", n, R);
            }
            cases++;
        }
    CHECK(bad == 0, "shards of n in 0..40 over 1..7 replicas: contiguous, exact cover, sizes within one, "
                    "empty when n < replicas (%zu of %zu wrong)", bad, cases);
    mirror_shard(10, 3, 0, &begin, &count);
    CHECK(begin == 0 && count == 4, "10 over 3: replica 0 takes [0,4)");
    mirror_shard(10, 3, 2, &begin, &count);
    CHECK(begin == 7 && count == 3, "10 over 3: replica 2 takes [7,10)");
    mirror_shard(2, 5, 3, &begin, &count);
    CHECK(count == 0, "2 over 5: replica 3 is empty");
    mirror_shard(10, 3, 3, &begin, &count);
    CHECK(count == 0, "a replica index past the count gets nothing");
    mirror_shard(10, 0, 0, &begin, &count);
    CHECK(count == 0, "zero replicas: nothing");
}

/* An epoch of 50 samples in global batches of 7 (the last holds 1) over 3
   replicas: every sample is seen exactly once, for several epochs. */
static void test_epoch_coverage(void)
{
    enum { COUNT = 50, BATCH = 7, REPLICAS = 3 };
    size_t perm[COUNT], epoch, step, r, i, begin, count;
    int ok = 1;
    for (epoch = 0; epoch < 3; epoch++) {
        unsigned seen[COUNT] = {0};
        size_t steps = mirror_num_batches(COUNT, BATCH, 0), samples = 0;
        CHECK(steps == 8, "8 global batches");
        mirror_permutation(perm, COUNT, 99, epoch);
        for (step = 0; step < steps; step++) {
            size_t n = step * BATCH + BATCH <= COUNT ? BATCH : COUNT - step * BATCH;
            for (r = 0; r < REPLICAS; r++) {
                mirror_shard(n, REPLICAS, r, &begin, &count);
                for (i = 0; i < count; i++) {
                    seen[perm[step * BATCH + begin + i]]++;
                    samples++;
                }
            }
        }
        for (i = 0; i < COUNT; i++) ok &= seen[i] == 1;
        CHECK(samples == COUNT, "epoch %zu: %zu samples went to replicas", epoch, samples);
    }
    CHECK(ok, "every sample seen exactly once per epoch across 3 replicas");
}

/* Datasets over caller arrays (copied and borrowed), split into training
   and validation, and a model's softmax probabilities. */
static void test_arrays_and_split(void)
{
    enum { N = 20, F = 3 };
    static float x[N * F], t[N * 2];
    static int32_t y[N];
    mirror_dataset a, b, tr, va;
    mirror_error err = {0, ""};
    long live = live_allocs;
    size_t i, j, seen[N];
    int ok = 1;
    for (i = 0; i < N * F; i++) x[i] = (float)i;
    for (i = 0; i < N; i++) y[i] = (int32_t)(i % 4), t[2 * i] = (float)i, t[2 * i + 1] = -(float)i;
    CHECK(mirror_dataset_from_arrays(&a, x, y, t, N, F, 1, 1, 4, 2, 1, &err) == MIRROR_OK && a.x != x && !a.borrowed &&
              !memcmp(a.x, x, sizeof x) && !memcmp(a.labels, y, sizeof y) && !memcmp(a.targets, t, sizeof t) &&
              a.num_classes == 4 && a.target_dim == 2,
          "copied: its own arrays, equal to the caller's: %s", err.message);
    CHECK(mirror_dataset_from_arrays(&b, x, y, NULL, N, F, 1, 1, 4, 0, 0, &err) == MIRROR_OK && b.x == x &&
              b.labels == y && b.borrowed && !b.targets,
          "borrowed: the caller's arrays themselves");
    mirror_dataset_free(&b);
    CHECK(b.x == NULL && x[5] == 5.0f, "freeing a borrowed dataset frees none of the caller's arrays");
    y[7] = 4;
    CHECK(mirror_dataset_from_arrays(&b, x, y, NULL, N, F, 1, 1, 4, 0, 1, &err) == MIRROR_ERR_LABEL &&
              strstr(err.message, "sample 7") && !b.x,
          "a label outside [0, 4): refused, naming the sample: %s", err.message);
    y[7] = 3;
    t[3] = NAN;
    CHECK(mirror_dataset_from_arrays(&b, x, NULL, t, N, F, 1, 1, 0, 2, 1, &err) == MIRROR_ERR_ARGUMENT &&
              strstr(err.message, "target 3"),
          "a NaN target: refused: %s", err.message);
    t[3] = -1.0f;
    CHECK(mirror_dataset_from_arrays(&b, x, y, NULL, N, F, 1, 1, 0, 0, 1, &err) == MIRROR_ERR_ARGUMENT &&
              mirror_dataset_from_arrays(&b, x, NULL, NULL, 0, F, 1, 1, 0, 0, 1, &err) == MIRROR_ERR_ARGUMENT &&
              mirror_dataset_from_arrays(&b, NULL, NULL, NULL, N, F, 1, 1, 0, 0, 1, &err) == MIRROR_ERR_ARGUMENT &&
              mirror_dataset_from_arrays(&b, x, NULL, NULL, (size_t)-1, (size_t)-1, 2, 1, 0, 0, 1, &err) ==
                  MIRROR_ERR_ARGUMENT,
          "labels without classes, no samples, no x, sizes that overflow: refused");

    CHECK(mirror_dataset_split(&a, 5, 9, &tr, &va, &err) == MIRROR_OK && tr.count == 15 && va.count == 5 &&
              tr.num_classes == 4 && va.target_dim == 2,
          "split 20 into 15 and 5: %s", err.message);
    for (i = 0; i < N; i++) seen[i] = 0;
    for (i = 0; i < 20; i++) { /* every sample once, in one part, with its label and targets */
        const mirror_dataset *d = i < 15 ? &tr : &va;
        size_t r = i < 15 ? i : i - 15, s = (size_t)d->x[r * F] / F;
        ok &= s < N && d->labels[r] == (int32_t)(s % 4) && d->targets[2 * r] == (float)s && !seen[s]++;
        for (j = 0; j < F; j++) ok &= d->x[r * F + j] == (float)(s * F + j);
    }
    CHECK(ok, "every sample in exactly one part, whole");
    mirror_dataset_free(&tr), mirror_dataset_free(&va);
    CHECK(mirror_dataset_split(&a, 20, 9, &tr, &va, &err) == MIRROR_ERR_ARGUMENT && !tr.x && !va.x &&
              mirror_dataset_split(&a, 0, 9, &tr, &va, &err) == MIRROR_ERR_ARGUMENT,
          "a split that leaves a part empty: refused: %s", err.message);
    CHECK(mirror_dataset_split(&a, 5, 9, &a, &va, &err) == MIRROR_ERR_ARGUMENT && a.x && a.count == N &&
              mirror_dataset_split(&a, 5, 9, &tr, &tr, &err) == MIRROR_ERR_ARGUMENT,
          "all given as a part, or one dataset for both parts: refused, all intact: %s", err.message);
    mirror_dataset_free(&a);
    CHECK(live_allocs == live, "nothing leaked (%ld)", live_allocs - live);
}

static void test_predict_proba(void)
{
    mirror_strategy *s = new_strategy("cpu:2", 0);
    mirror_model_desc md = model_desc(s, 4, 0, 0, 0, 2);
    mirror_model *m = build_model(&md, NULL, "dense 5, tanh, dense 3");
    float x[6 * 4], p[6 * 3], z[6 * 3];
    size_t i, j;
    int ok = 1;
    for (i = 0; i < 6 * 4; i++) x[i] = (float)((int)(i * 7 % 11) - 5) * 0.3f;
    CHECK(mirror_predict(m, x, 6, z) == MIRROR_OK && mirror_predict_proba(m, x, 6, p) == MIRROR_OK,
          "predict and predict_proba: %s", mirror_model_error(m));
    for (i = 0; i < 6; i++) {
        double sum = 0.0, norm = 0.0;
        for (j = 0; j < 3; j++) sum += p[i * 3 + j], norm += exp((double)z[i * 3 + j]);
        for (j = 0; j < 3; j++) ok &= fabs(p[i * 3 + j] - exp((double)z[i * 3 + j]) / norm) < 1e-6;
        ok &= fabs(sum - 1.0) < 1e-6;
    }
    CHECK(ok, "each row the softmax of the logits, summing to 1");
    mirror_model_destroy(m);
    md.loss = MIRROR_LOSS_MSE;
    mirror_model_create(&md, &m, NULL);
    mirror_dense(m, 3), mirror_model_build(m);
    CHECK(mirror_predict_proba(m, x, 6, p) == MIRROR_ERR_ARGUMENT && strstr(mirror_model_error(m), "softmax"),
          "an MSE model has no probabilities: %s", mirror_model_error(m));
    mirror_model_destroy(m);
    mirror_strategy_destroy(s);
}

int main(void)
{
    if (!make_root("test_data")) return 1;
    make_good();
    test_good_load();
    test_truncated();
    test_bad_headers();
    test_labels_and_arguments();
    test_mnist();
    test_gzip();
    test_synthetic();
    test_permutation();
    test_shard();
    test_epoch_coverage();
    test_arrays_and_split();
    test_predict_proba();
    remove_tree(root);
    CHECK(access(root, F_OK) != 0, "the temporary directory %s is removed", root);
    CHECK(live_allocs == 0, "every allocation freed (%ld live)", live_allocs);
    return check_done("test_data");
}
