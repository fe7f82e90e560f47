/* test_loaders.c - files on disk: the IDX / MNIST, CIFAR-10 and NumPy .npy
   loaders, plain and gzip (through zlib, or its absence in
   build/nozlib_test_loaders), on good and hostile files. IDX: every failure
   returns an error, leaves the dataset empty and frees everything.
   CIFAR-10 and .npy: batches concatenated in order, every .npy dtype, rank
   and header version; truncations at every length, bad headers, odd shapes, bad labels
   and bit flips each return an error with a message naming the file, leave
   the dataset empty and free everything. The parsers also run on exact-size
   copies in memory, so a sanitizer sees any read past the end. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp, rmdir; mirror.h is not the first include */
#include "alloc_count.h"
#define MIRROR_IMPLEMENTATION
#include "../mirror.h"
#include "check.h"
#include "helpers.h"
#include "files.h"

#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef MIRROR_ZLIB
#include <zlib.h>
#endif

// >>files -------------------------------------------------------------------


/* After a load that should have failed with want (0: any error): err has the
   code and a message that contains mention (when given) and mention2 (when
   given), ds is empty and the allocations are back to live. */
static void failed(const char *what, int rc, mirror_dataset *ds, const mirror_error *err, long live, int want,
                   const char *mention, const char *mention2)
{
    CHECK(rc < 0 && (want == 0 || rc == want), "%s: got %d (%s: %s), want %s", what, rc, mirror_result_string(rc),
          err->message, want ? mirror_result_string(want) : "an error");
    CHECK(err->code == rc && err->message[0] != '\0', "%s: err gets the code and a message (%d, \"%s\")", what,
          err->code, err->message);
    if (mention)
        CHECK(strstr(err->message, mention) != NULL, "%s: the message \"%s\" names %s", what, err->message,
              mention);
    if (mention2)
        CHECK(strstr(err->message, mention2) != NULL, "%s: the message \"%s\" names %s", what, err->message,
              mention2);
    CHECK(zeroed(ds), "%s: the dataset is left empty", what);
    if (rc == MIRROR_OK) mirror_dataset_free(ds); /* a wrong success: free it, leak-check the rest */
    CHECK(live_allocs == live, "%s: %ld allocations leaked", what, live_allocs - live);
}

/* An exact-size heap copy of p (so that reading past size is caught). */
static unsigned char *exact_copy(const unsigned char *p, size_t size)
{
    unsigned char *c = (unsigned char *)malloc(size ? size : 1);
    if (c && size) memcpy(c, p, size);
    return c;
}

static void put_le32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)v, p[1] = (unsigned char)(v >> 8), p[2] = (unsigned char)(v >> 16);
    p[3] = (unsigned char)(v >> 24);
}

static void put_le64(unsigned char *p, uint64_t v)
{
    put_le32(p, (uint32_t)v);
    put_le32(p + 4, (uint32_t)(v >> 32));
}

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

// >>IDX files -----------------------------------------------------------------


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
    char dir[256], p[256], longdir[4090];
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
    /* with "/train-images-idx3-ubyte.gz" it would pass PATH_MAX (1300 and
       4000 bytes, which fit: test_outputs) */
    expect_mnist_fail("a 4089-character directory name", longdir, MIRROR_ERR_ARGUMENT, "(PATH_MAX)");

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
              strstr(err.message, "zlib") && strstr(err.message, p) &&
              strstr(err.message, "the file that defines MIRROR_IMPLEMENTATION"),
          "the message names the file, zlib and where MIRROR_ZLIB belongs: \"%s\"", err.message);

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

// >>CIFAR-10 ------------------------------------------------------------------

#define REC 3073 /* a label byte and 3 x 32 x 32 pixels */
#define PIX 3072
static unsigned char batch_a[3 * REC], batch_b[2 * REC];
static const unsigned char labels_a[3] = {0, 9, 4}, labels_b[2] = {7, 2};
static char cifar_a[256], cifar_b[256];

static void make_batch(unsigned char *b, size_t n, const unsigned char *labels, unsigned salt)
{
    size_t r, j;
    for (r = 0; r < n; r++) {
        b[r * REC] = labels[r];
        for (j = 0; j < PIX; j++) b[r * REC + 1 + j] = (unsigned char)((7 * j + 131 * r + salt) % 256);
    }
}

/* ds holds the records of the batches in order. */
static int holds_batches(const mirror_dataset *ds, const unsigned char *const *batches, const size_t *counts,
                         size_t nbatches)
{
    size_t b, r, j, at = 0;
    if (!ds->x || !ds->labels || ds->targets || ds->channels != 3 || ds->height != 32 || ds->width != 32 ||
        ds->num_classes != 10 || ds->target_dim != 0)
        return 0;
    for (b = 0; b < nbatches; b++)
        for (r = 0; r < counts[b]; r++, at++) {
            const unsigned char *rec = batches[b] + r * REC;
            if (at >= ds->count || ds->labels[at] != rec[0]) return 0;
            for (j = 0; j < PIX; j++)
                if (ds->x[at * PIX + j] != (float)rec[1 + j] * (1.0f / 255.0f)) return 0;
        }
    return at == ds->count;
}

static void cifar_fail(const char *what, const char *const *paths, size_t npaths, int want, const char *mention)
{
    mirror_dataset ds;
    mirror_error err = {0, ""};
    long live = live_allocs;
    int rc;
    memset(&ds, 0x5a, sizeof ds); /* garbage in: the loader must not read it */
    rc = mirror_dataset_load_cifar10(&ds, paths, npaths, &err);
    failed(what, rc, &ds, &err, live, want, mention, NULL);
}

/* The parser on an exact-size copy: fails with want, ds empty, no leak. */
static void cifar_parse_fail(const char *what, const unsigned char *p, size_t size, int want)
{
    mirror_dataset ds;
    mirror_error err = {0, ""};
    long live = live_allocs;
    unsigned char *c = exact_copy(p, size);
    int rc;
    memset(&ds, 0x5a, sizeof ds);
    rc = mirror__parse_cifar10(&ds, c, size, "memory", &err);
    failed(what, rc, &ds, &err, live, want, "memory", NULL);
    free(c);
}

static void test_cifar_good(void)
{
    const char *paths[3];
    const unsigned char *batches[3];
    size_t counts[3];
    mirror_dataset ds;
    mirror_error err = {0, ""};
    long live = live_allocs;
    int rc;

    make_batch(batch_a, 3, labels_a, 11);
    make_batch(batch_b, 2, labels_b, 200);
    write_file(path_in(cifar_a, "data_batch_1.bin"), batch_a, sizeof batch_a);
    write_file(path_in(cifar_b, "data_batch_2.bin"), batch_b, sizeof batch_b);

    paths[0] = cifar_a, paths[1] = cifar_b;
    batches[0] = batch_a, counts[0] = 3, batches[1] = batch_b, counts[1] = 2;
    memset(&ds, 0x5a, sizeof ds);
    rc = mirror_dataset_load_cifar10(&ds, paths, 2, &err);
    CHECK(rc == MIRROR_OK, "load batches of 3 and 2 records: %d %s", rc, err.message);
    CHECK(ds.count == 5 && ds.channels == 3 && ds.height == 32 && ds.width == 32,
          "5 images of 3x32x32 (got %zu of %zux%zux%zu)", ds.count, ds.channels, ds.height, ds.width);
    CHECK(ds.num_classes == 10 && ds.targets == NULL && ds.target_dim == 0, "10 classes, no targets");
    CHECK(holds_batches(&ds, batches, counts, 2), "the records of both files in order: labels, pixels byte/255");
    CHECK(ds.labels && ds.labels[0] == 0 && ds.labels[1] == 9 && ds.labels[2] == 4 && ds.labels[3] == 7 &&
              ds.labels[4] == 2,
          "labels 0 9 4 then 7 2");
    /* NCHW as stored: image 4 (record 1 of the second file), green, row 2, column 5. */
    CHECK(ds.x && ds.x[4 * PIX + 1 * 1024 + 2 * 32 + 5] ==
                      (float)batch_b[REC + 1 + 1024 + 2 * 32 + 5] * (1.0f / 255.0f),
          "image 4, plane G, row 2, column 5 is the G plane's byte 69 of its record");
    {
        size_t i, lo = 0, hi = 0;
        for (i = 0; ds.x && i < 5 * PIX; i++) lo += ds.x[i] == 0.0f, hi += ds.x[i] == 1.0f;
        CHECK(lo > 0 && hi > 0, "byte 0 is 0.0 and byte 255 is exactly 1.0 (%zu, %zu)", lo, hi);
    }
    mirror_dataset_free(&ds);
    CHECK(live_allocs == live, "free released the load's allocations");

    paths[0] = cifar_b, paths[1] = cifar_a, paths[2] = cifar_b;
    batches[0] = batch_b, counts[0] = 2, batches[1] = batch_a, counts[1] = 3, batches[2] = batch_b, counts[2] = 2;
    rc = mirror_dataset_load_cifar10(&ds, paths, 3, NULL);
    CHECK(rc == MIRROR_OK && ds.count == 7 && holds_batches(&ds, batches, counts, 3),
          "b, a, b: 7 records in the order given (err NULL)");
    mirror_dataset_free(&ds);

    rc = mirror_dataset_load_cifar10(&ds, paths + 1, 1, &err);
    CHECK(rc == MIRROR_OK && ds.count == 3 && holds_batches(&ds, batches + 1, counts + 1, 1), "one file: %s",
          err.message);
    mirror_dataset_free(&ds);

    rc = mirror__parse_cifar10(&ds, batch_b, sizeof batch_b, "memory", &err);
    CHECK(rc == MIRROR_OK && ds.count == 2 && holds_batches(&ds, batches, counts, 1),
          "mirror__parse_cifar10 from memory");
    mirror_dataset_free(&ds);
#ifdef MIRROR_ZLIB
    {
        char gz[256];
        write_gz(path_in(gz, "data_batch_1.bin.gz"), batch_a, sizeof batch_a);
        paths[0] = gz, paths[1] = cifar_b;
        batches[0] = batch_a, counts[0] = 3, batches[1] = batch_b, counts[1] = 2;
        rc = mirror_dataset_load_cifar10(&ds, paths, 2, &err);
        CHECK(rc == MIRROR_OK && holds_batches(&ds, batches, counts, 2), "a gzip batch and a plain one: %s",
              err.message);
        mirror_dataset_free(&ds);
    }
#endif
    CHECK(live_allocs == live, "the good loads were all freed");
}

static void test_cifar_hostile(void)
{
    char p[256], what[128], dir[256];
    const char *paths[3];
    unsigned char bad[3 * REC];
    size_t len;
    mirror_dataset ds;
    mirror_error err = {0, ""};
    long live;

    /* Every length up to two records and one byte that is not a positive
       whole number of records: as a file and in memory. */
    path_in(p, "truncated.bin");
    for (len = 0; len <= 2 * REC + 1; len++) {
        if (len % REC == 0 && len != 0) continue;
        write_file(p, batch_a, len);
        snprintf(what, sizeof what, "CIFAR batch of %zu bytes", len);
        paths[0] = p;
        cifar_fail(what, paths, 1, MIRROR_ERR_FORMAT, p);
        cifar_parse_fail(what, batch_a, len, MIRROR_ERR_FORMAT);
    }
    write_file(p, batch_a, 2 * REC + 7);
    paths[0] = cifar_a, paths[1] = p;
    cifar_fail("a good batch, then one of 2 records and 7 bytes", paths, 2, MIRROR_ERR_FORMAT, p);
    cifar_fail("a good batch, then one of 2 records and 7 bytes (names the bad one)", paths, 2, MIRROR_ERR_FORMAT,
               "7 bytes over");
    /* extra bytes are not a truncation: the message gives the size and the sizes a whole file would have */
    cifar_fail("a batch of 2 records and 7 bytes: the sizes", paths, 2, MIRROR_ERR_FORMAT,
               "size 6153 is not a multiple of the 3073-byte CIFAR-10 record: 2 records and 7 bytes over "
               "(expected 6146 or 9219 bytes)");
    {
        mirror_dataset junk;
        mirror_dataset_load_cifar10(&junk, paths, 2, &err);
        CHECK(strlen(err.message) > strlen(p) && !strstr(err.message + strlen(p), "truncated"),
              "a file with bytes over is not called truncated: %s", err.message);
    }

    path_in(p, "empty.bin");
    write_file(p, batch_a, 0);
    paths[0] = p;
    cifar_fail("an empty CIFAR file", paths, 1, MIRROR_ERR_FORMAT, p);
    paths[0] = cifar_a, paths[1] = p;
    cifar_fail("a good batch and an empty one", paths, 2, MIRROR_ERR_FORMAT, p);

    /* Labels: 10 and 255 in any record, from file and memory. */
    memcpy(bad, batch_a, sizeof bad);
    bad[2 * REC] = 10;
    path_in(p, "label10.bin");
    write_file(p, bad, sizeof bad);
    paths[0] = cifar_a, paths[1] = p, paths[2] = cifar_b;
    cifar_fail("label 10 in record 2 of the second file", paths, 3, MIRROR_ERR_LABEL, p);
    cifar_fail("label 10: the message gives the label", paths, 3, MIRROR_ERR_LABEL, "label 10 of record 2");
    cifar_parse_fail("label 10 in memory", bad, sizeof bad, MIRROR_ERR_LABEL);
    memcpy(bad, batch_a, sizeof bad);
    bad[0] = 255;
    write_file(p, bad, sizeof bad);
    paths[0] = p;
    cifar_fail("label 255 in record 0", paths, 1, MIRROR_ERR_LABEL, p);

    /* Missing files, a directory, NULL arguments. */
    path_in(p, "no-such-batch.bin");
    paths[0] = p;
    cifar_fail("a missing CIFAR file", paths, 1, MIRROR_ERR_IO, p);
    paths[0] = cifar_a, paths[1] = cifar_b, paths[2] = p;
    cifar_fail("two good batches, then a missing one", paths, 3, MIRROR_ERR_IO, p);
    path_in(dir, "a-directory");
    mkdir(dir, 0700);
    paths[0] = dir;
    cifar_fail("a directory as a CIFAR batch", paths, 1, 0, NULL);

    live = live_allocs;
    CHECK(mirror_dataset_load_cifar10(NULL, paths, 1, &err) == MIRROR_ERR_ARGUMENT && err.message[0],
          "NULL dataset is an argument error");
    memset(&ds, 0x5a, sizeof ds);
    CHECK(mirror_dataset_load_cifar10(&ds, NULL, 1, &err) == MIRROR_ERR_ARGUMENT && zeroed(&ds),
          "NULL paths is an argument error, the dataset left empty");
    memset(&ds, 0x5a, sizeof ds);
    CHECK(mirror_dataset_load_cifar10(&ds, paths, 0, NULL) == MIRROR_ERR_ARGUMENT && zeroed(&ds),
          "no paths is an argument error");
    paths[0] = cifar_a, paths[1] = NULL;
    memset(&ds, 0x5a, sizeof ds);
    CHECK(mirror_dataset_load_cifar10(&ds, paths, 2, &err) == MIRROR_ERR_ARGUMENT && zeroed(&ds) &&
              strstr(err.message, "paths[1]"),
          "paths[1] NULL is an argument error: %s", err.message);
    CHECK(live_allocs == live, "NULL arguments allocate nothing");
}

// >>.npy files ----------------------------------------------------------------

/* A .npy file: version major.minor, the header dict padded with spaces and a
   newline to a multiple of 64 bytes (as numpy writes it), then the data.
   Returns its size. */
static size_t make_npy_version(unsigned char *buf, unsigned major, unsigned minor, const char *dict,
                               const void *data, size_t n)
{
    size_t pre = major == 1 ? 10 : 12, len = strlen(dict), hlen = len + 1;
    hlen += (64 - (pre + hlen) % 64) % 64;
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (unsigned char)major, buf[7] = (unsigned char)minor;
    if (major == 1)
        buf[8] = (unsigned char)hlen, buf[9] = (unsigned char)(hlen >> 8);
    else
        put_le32(buf + 8, (uint32_t)hlen);
    memcpy(buf + pre, dict, len);
    memset(buf + pre + len, ' ', hlen - len - 1);
    buf[pre + hlen - 1] = '\n';
    if (n) memcpy(buf + pre + hlen, data, n);
    return pre + hlen + n;
}

static size_t make_npy(unsigned char *buf, unsigned major, const char *dict, const void *data, size_t n)
{
    return make_npy_version(buf, major, 0, dict, data, n);
}

/* The dict numpy writes for descr and shape (C order). */
static const char *dict_of(char *out, const char *descr, const char *shape)
{
    snprintf(out, 256, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shape);
    return out;
}

/* Written by numpy 2.4: np.save of np.array([[0.5, -1.25, 3.0], [1e-3, 65504.0,
   -0.0]], dtype='<f4') and of np.array([3, 1], dtype='<i8'). */
static const char numpy_x[] = "\x93NUMPY\x01\x00\x76\x00"
    "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"
    "                                                          "
    "\n"
    "\x00\x00\x00\x3f\x00\x00\xa0\xbf\x00\x00\x40\x40\x6f\x12\x83\x3a\x00\xe0\x7f\x47\x00\x00\x00\x80";
static const char numpy_y[] = "\x93NUMPY\x01\x00\x76\x00"
    "{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }"
    "                                                            "
    "\n"
    "\x03\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00";

/* The good pair the hostile cases start from: x <f4 (4, 3), y <i4 (4,). */
#define NX 4
#define FX 3
static const uint32_t good_bits[NX * FX] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u,
                                            0x7fc00001u, 0x00000001u, 0x3f800000u, 0x7149f2cau,
                                            0xbf000000u, 0x3eaaaaabu, 0x42f60000u, 0x00800000u};
static const int32_t good_y[NX] = {0, 2, 1, 2};
static unsigned char gx[1024], gy[1024], xdata[NX * FX * 4], ydata[NX * 4];
static size_t gx_size, gy_size;
static char x_path[256], y_path[256];

static void make_good_npy(void)
{
    char d[256];
    size_t i;
    for (i = 0; i < NX * FX; i++) put_le32(xdata + 4 * i, good_bits[i]);
    for (i = 0; i < NX; i++) put_le32(ydata + 4 * i, (uint32_t)good_y[i]);
    gx_size = make_npy(gx, 1, dict_of(d, "<f4", "(4, 3)"), xdata, sizeof xdata);
    gy_size = make_npy(gy, 1, dict_of(d, "<i4", "(4,)"), ydata, sizeof ydata);
    write_file(path_in(x_path, "x.npy"), gx, gx_size);
    write_file(path_in(y_path, "y.npy"), gy, gy_size);
}

/* ds holds the good pair (labels too when with_y). */
static int holds_good(const mirror_dataset *ds, int with_y)
{
    size_t i;
    if (!ds->x || ds->targets || ds->count != NX || ds->channels != FX || ds->height != 1 || ds->width != 1 ||
        ds->target_dim != 0)
        return 0;
    for (i = 0; i < NX * FX; i++)
        if (bits_of(ds->x[i]) != good_bits[i]) return 0;
    if (!with_y) return !ds->labels && ds->num_classes == 0;
    if (!ds->labels || ds->num_classes != 3) return 0;
    for (i = 0; i < NX; i++)
        if (ds->labels[i] != good_y[i]) return 0;
    return 1;
}

/* Loads x (and y) as files; returns the result, ds filled. */
static int load_pair(mirror_dataset *ds, const unsigned char *x, size_t xn, const unsigned char *y, size_t yn,
                     mirror_error *err)
{
    char xp[256], yp[256];
    if (x) write_file(path_in(xp, "pair-x.npy"), x, xn);
    if (y) write_file(path_in(yp, "pair-y.npy"), y, yn);
    return mirror_dataset_load_npy(ds, x ? xp : x_path, y ? yp : y_path, err);
}

static void test_npy_good(void)
{
    mirror_dataset ds;
    mirror_error err = {0, ""};
    unsigned char buf[4096], lab[1024], data[2 * 3 * 4 * 5 * 4];
    char d[256], p[256];
    long live = live_allocs;
    size_t i, n;
    int rc;

    make_good_npy();
    memset(&ds, 0x5a, sizeof ds);
    rc = mirror_dataset_load_npy(&ds, x_path, y_path, &err);
    CHECK(rc == MIRROR_OK, "load <f4 (4, 3) and <i4 (4,), version 1.0: %d %s", rc, err.message);
    CHECK(holds_good(&ds, 1), "4 samples of 3 features (3x1x1), floats bit for bit (-0, inf, NaN, denormal), "
                              "labels, num_classes 3");
    mirror_dataset_free(&ds);
    rc = mirror_dataset_load_npy(&ds, x_path, NULL, NULL);
    CHECK(rc == MIRROR_OK && holds_good(&ds, 0), "y NULL: no labels, num_classes 0 (err NULL)");
    mirror_dataset_free(&ds);
    CHECK(live_allocs == live, "free released the loads");

    /* What numpy itself writes. */
    CHECK(sizeof numpy_x - 1 == 152 && sizeof numpy_y - 1 == 144, "the numpy files are as long as numpy's");
    rc = load_pair(&ds, (const unsigned char *)numpy_x, sizeof numpy_x - 1, (const unsigned char *)numpy_y,
                   sizeof numpy_y - 1, &err);
    CHECK(rc == MIRROR_OK && ds.count == 2 && ds.channels == 3 && ds.height == 1 && ds.width == 1 &&
              ds.num_classes == 4 && ds.labels && ds.labels[0] == 3 && ds.labels[1] == 1,
          "numpy's own files: 2 x 3 floats, <i8 labels 3 1, 4 classes: %s", err.message);
    CHECK(ds.x && ds.x[0] == 0.5f && ds.x[1] == -1.25f && ds.x[2] == 3.0f && ds.x[3] == 1e-3f &&
              ds.x[4] == 65504.0f && bits_of(ds.x[5]) == 0x80000000u,
          "numpy's floats: 0.5 -1.25 3 0.001 65504 -0");
    mirror_dataset_free(&ds);

    /* |u1 (4, 5, 6), version 2.0, labels |u1: one channel, byte/255. */
    for (i = 0; i < 4 * 5 * 6; i++) data[i] = (unsigned char)(i * 37 % 256);
    data[0] = 0, data[4 * 5 * 6 - 1] = 255;
    {
        static const unsigned char ys[4] = {5, 0, 1, 1};
        n = make_npy(buf, 2, dict_of(d, "|u1", "(4, 5, 6)"), data, 4 * 5 * 6);
        rc = load_pair(&ds, buf, n, lab, make_npy(lab, 2, dict_of(d, "|u1", "(4,)"), ys, 4), &err);
        CHECK(rc == MIRROR_OK && ds.count == 4 && ds.channels == 1 && ds.height == 5 && ds.width == 6 &&
                  ds.num_classes == 6,
              "|u1 (4, 5, 6) v2.0: 4 images of 1x5x6, |u1 labels, 6 classes: %s", err.message);
        for (i = 0; ds.x && i < 4 * 5 * 6; i++)
            if (ds.x[i] != (float)data[i] * (1.0f / 255.0f)) break;
        CHECK(ds.x && i == 4 * 5 * 6 && ds.x[0] == 0.0f && ds.x[4 * 5 * 6 - 1] == 1.0f,
              "|u1 pixels are byte/255, 255 is exactly 1.0");
        CHECK(ds.labels && ds.labels[0] == 5 && ds.labels[3] == 1, "|u1 labels as written");
        mirror_dataset_free(&ds);
    }

    /* <f4 (2, 3, 4, 5), version 3.0, labels <i8 up to 65535: NCHW. */
    for (i = 0; i < 2 * 3 * 4 * 5; i++) put_le32(data + 4 * i, bits_of((float)i * 0.25f - 7.0f));
    {
        unsigned char ys[16];
        put_le64(ys, 65535), put_le64(ys + 8, 0);
        n = make_npy(buf, 3, dict_of(d, "<f4", "(2, 3, 4, 5)"), data, sizeof data);
        rc = load_pair(&ds, buf, n, lab, make_npy(lab, 3, dict_of(d, "<i8", "(2,)"), ys, 16), &err);
        CHECK(rc == MIRROR_OK && ds.count == 2 && ds.channels == 3 && ds.height == 4 && ds.width == 5 &&
                  ds.num_classes == 65536,
              "<f4 (2, 3, 4, 5) v3.0: 2 images of 3x4x5, <i8 label 65535 gives 65536 classes: %s", err.message);
        for (i = 0; ds.x && i < 2 * 3 * 4 * 5; i++)
            if (ds.x[i] != (float)i * 0.25f - 7.0f) break;
        CHECK(ds.x && i == 2 * 3 * 4 * 5, "the rank-4 floats in C order");
        CHECK(ds.labels && ds.labels[0] == 65535 && ds.labels[1] == 0, "<i8 labels 65535 0");
        mirror_dataset_free(&ds);
    }

    /* Headers that are written differently but mean the same (4, 3) <f4. */
    {
        static const char *const dicts[] = {
            "{'shape': (4, 3), 'fortran_order': False, 'descr': '<f4'}",
            "{'fortran_order': False, 'descr': '<f4', 'shape': (4, 3,), }",
            "{ \"descr\" : \"<f4\" ,\n\t'fortran_order':False,'shape':( 4 , 3 , ) ,\r\n }",
            "{'descr':'<f4','fortran_order':False,'shape':(4,3)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (4L, 3L), }", /* Python 2, in version 1.0 */
        };
        for (i = 0; i < sizeof dicts / sizeof *dicts; i++) {
            n = make_npy(buf, 1, dicts[i], xdata, sizeof xdata);
            rc = load_pair(&ds, buf, n, NULL, 0, &err);
            CHECK(rc == MIRROR_OK && holds_good(&ds, 1), "header %s: %s", dicts[i], err.message);
            mirror_dataset_free(&ds);
        }
        /* No padding at all, the newline alone, and a header of spaces without the newline. */
        n = (size_t)sprintf((char *)buf + 10, "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 3)}\n");
        memcpy(buf, "\x93NUMPY\x01\x00", 8);
        buf[8] = (unsigned char)n, buf[9] = 0;
        memcpy(buf + 10 + n, xdata, sizeof xdata);
        rc = load_pair(&ds, buf, 10 + n + sizeof xdata, NULL, 0, &err);
        CHECK(rc == MIRROR_OK && holds_good(&ds, 1), "an unpadded header: %s", err.message);
        mirror_dataset_free(&ds);
        buf[10 + n - 1] = ' ';
        rc = load_pair(&ds, buf, 10 + n + sizeof xdata, NULL, 0, &err);
        CHECK(rc == MIRROR_OK && holds_good(&ds, 1), "a header ending in a space, not a newline: %s", err.message);
        mirror_dataset_free(&ds);
    }

    /* <u1 (as other writers spell uint8) and (n, f) of bytes; the y file of an x. */
    n = make_npy(buf, 1, dict_of(d, "<u1", "(4, 3)"), data, 12);
    rc = load_pair(&ds, buf, n, NULL, 0, &err);
    CHECK(rc == MIRROR_OK && ds.count == 4 && ds.channels == 3 && ds.x && ds.x[5] == (float)data[5] * (1.0f / 255.0f),
          "<u1 is uint8 too: %s", err.message);
    mirror_dataset_free(&ds);

#ifdef MIRROR_ZLIB
    write_gz(path_in(p, "x.npy.gz"), gx, gx_size);
    rc = mirror_dataset_load_npy(&ds, p, y_path, &err);
    CHECK(rc == MIRROR_OK && holds_good(&ds, 1), "a gzip .npy: %s", err.message);
    mirror_dataset_free(&ds);
#endif
    (void)p;

    /* The parser from memory: the data pointer, the shape, the count. */
    {
        mirror__npy a;
        rc = mirror__parse_npy(gx, gx_size, "memory", &a, &err);
        CHECK(rc == MIRROR_OK && a.dtype == MIRROR__NPY_F4 && a.ndim == 2 && a.shape[0] == 4 && a.shape[1] == 3 &&
                  a.count == 12 && a.data == gx + 128 && !strcmp(a.descr, "<f4"),
              "mirror__parse_npy: <f4 (4, 3), 12 elements at byte 128");
        rc = mirror__parse_npy((const unsigned char *)numpy_y, sizeof numpy_y - 1, "memory", &a, &err);
        CHECK(rc == MIRROR_OK && a.dtype == MIRROR__NPY_I8 && a.ndim == 1 && a.count == 2,
              "mirror__parse_npy: <i8 (2,)");
        n = make_npy(buf, 1, dict_of(d, "<f4", "()"), xdata, 4);
        rc = mirror__parse_npy(buf, n, "memory", &a, &err);
        CHECK(rc == MIRROR_OK && a.ndim == 0 && a.count == 1, "mirror__parse_npy: shape () is one element");
    }
    CHECK(live_allocs == live, "the good loads were all freed");
}

/* The load of x (NULL: the good x file) and y (NULL: the good y file) must
   fail with want; the message names the x file (names 'x'), the y file
   ('y') or both ('b'), and contains text when given. The parser also runs
   on exact-size copies of the bytes given. */
static void npy_fail(const char *what, const unsigned char *x, size_t xn, const unsigned char *y, size_t yn,
                     int want, int names, const char *text)
{
    char xp[256], yp[256];
    mirror_dataset ds;
    mirror_error err = {0, ""};
    long live = live_allocs;
    int rc;
    if (x) write_file(path_in(xp, "bad-x.npy"), x, xn);
    if (y) write_file(path_in(yp, "bad-y.npy"), y, yn);
    memset(&ds, 0x5a, sizeof ds);
    rc = mirror_dataset_load_npy(&ds, x ? xp : x_path, y ? yp : y_path, &err);
    failed(what, rc, &ds, &err, live, want, names == 'y' ? (y ? yp : y_path) : (x ? xp : x_path),
           names == 'b' ? (y ? yp : y_path) : text);
    if (names == 'b' && text) CHECK(strstr(err.message, text) != NULL, "%s: \"%s\" says %s", what, err.message, text);
    if (x || y) {
        mirror__npy a;
        unsigned char *c = exact_copy(x ? x : y, x ? xn : yn);
        rc = mirror__parse_npy(c, x ? xn : yn, "memory", &a, &err);
        CHECK(rc == MIRROR_OK || (rc < 0 && err.code == rc && strstr(err.message, "memory")),
              "%s: the parser from memory: %d %s", what, rc, err.message);
        free(c);
    }
}

/* An x file of header dict and nbytes of data (zeros past the good data). */
static size_t bad_x(unsigned char *buf, unsigned major, const char *dict, size_t nbytes)
{
    static unsigned char zeros[4096];
    memcpy(zeros, xdata, sizeof xdata);
    return make_npy(buf, major, dict, zeros, nbytes);
}

static void test_npy_truncated(void)
{
    unsigned char buf[1024];
    char what[128], d[256];
    size_t len, n, i;
    static const size_t in_data[] = {129, 131, 132, 133, 150, 175};

    /* Every byte of the version 1.0 header, the preamble included. */
    for (len = 0; len <= 128; len++) {
        snprintf(what, sizeof what, "x truncated to %zu of %zu bytes", len, gx_size);
        npy_fail(what, gx, len, NULL, 0, MIRROR_ERR_FORMAT, 'x', NULL);
    }
    for (i = 0; i < sizeof in_data / sizeof *in_data; i++) {
        snprintf(what, sizeof what, "x truncated in the data to %zu of %zu bytes", in_data[i], gx_size);
        npy_fail(what, gx, in_data[i], NULL, 0, MIRROR_ERR_FORMAT, 'x', "truncated data");
    }
    for (len = 0; len < gy_size; len++) {
        snprintf(what, sizeof what, "y truncated to %zu of %zu bytes", len, gy_size);
        npy_fail(what, NULL, 0, gy, len, MIRROR_ERR_FORMAT, 'y', NULL);
    }
    /* Version 2.0: a 4-byte header length. */
    n = make_npy(buf, 2, dict_of(d, "<f4", "(4, 3)"), xdata, sizeof xdata);
    for (len = 0; len < n; len += len < 140 ? 1 : 7) {
        snprintf(what, sizeof what, "version 2.0 x truncated to %zu of %zu bytes", len, n);
        npy_fail(what, buf, len, NULL, 0, MIRROR_ERR_FORMAT, 'x', NULL);
    }
}

static void test_npy_headers(void)
{
    unsigned char buf[4096];
    char d[256], what[300];
    size_t i, n;

    /* Magic and version. */
    for (i = 0; i < 6; i++) {
        memcpy(buf, gx, gx_size);
        buf[i] ^= 0x20;
        snprintf(what, sizeof what, "magic byte %zu changed", i);
        npy_fail(what, buf, gx_size, NULL, 0, MIRROR_ERR_FORMAT, 'x', "magic");
    }
    {
        static const unsigned char versions[][2] = {{0, 0}, {1, 1}, {2, 1}, {3, 9}, {4, 0}, {255, 255}};
        for (i = 0; i < sizeof versions / sizeof *versions; i++) {
            n = make_npy_version(buf, versions[i][0], versions[i][1], dict_of(d, "<f4", "(4, 3)"), xdata,
                                 sizeof xdata);
            snprintf(what, sizeof what, "version %u.%u", versions[i][0], versions[i][1]);
            npy_fail(what, buf, n, NULL, 0, MIRROR_ERR_UNSUPPORTED, 'x', "version");
        }
    }

    /* Header lengths past the end of the file, and too short. */
    memcpy(buf, gx, gx_size);
    buf[8] = (unsigned char)(gx_size - 10 + 1), buf[9] = 0;
    npy_fail("header length one past the end", buf, gx_size, NULL, 0, MIRROR_ERR_FORMAT, 'x', "header");
    buf[8] = 0xff, buf[9] = 0xff;
    npy_fail("header length 65535", buf, gx_size, NULL, 0, MIRROR_ERR_FORMAT, 'x', "header");
    buf[8] = 100, buf[9] = 0;
    npy_fail("header length 100 (the data starts in the padding)", buf, gx_size, NULL, 0, MIRROR_ERR_FORMAT, 'x',
             "trailing");
    buf[8] = 0, buf[9] = 0;
    npy_fail("header length 0", buf, gx_size, NULL, 0, MIRROR_ERR_FORMAT, 'x', "not a dict");
    n = make_npy(buf, 2, dict_of(d, "<f4", "(4, 3)"), xdata, sizeof xdata);
    put_le32(buf + 8, 0xffffffffu);
    npy_fail("version 2.0 header length 0xffffffff", buf, n, NULL, 0, MIRROR_ERR_FORMAT, 'x', "header");
    put_le32(buf + 8, 0x80000000u);
    npy_fail("version 2.0 header length 0x80000000", buf, n, NULL, 0, MIRROR_ERR_FORMAT, 'x', "header");

    /* Headers that are not the dict. */
    {
        static const char *const odd[] = {
            "", "   ", "[('descr', '<f4')]", "descr: <f4", "'descr'", "{",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 3)",
            "{'descr': '<f4' 'fortran_order': False, 'shape': (4, 3)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 3), } x",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 3)}}",
            "{,}", "{'descr': '<f4',, 'fortran_order': False, 'shape': (4, 3)}",
            "{descr: '<f4', 'fortran_order': False, 'shape': (4, 3)}",
            "{'descr' '<f4', 'fortran_order': False, 'shape': (4, 3)}",
            "{'descr': '<f4\\'', 'fortran_order': False, 'shape': (4, 3)}",
            "{'descr': '<f4, 'fortran_order': False, 'shape': (4, 3)}",
            "{'descr': \"<f4', 'fortran_order': False, 'shape': (4, 3)}",
            "{'descr': <f4, 'fortran_order': False, 'shape': (4, 3)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 3), 'extra': 1}",
            "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (4, 3)}",
            "{'descr': '<f4', 'fortran_order': False, 'fortran_order': False, 'shape': (4, 3)}",
            "{'descr': '<f4', 'fortran_order': False}",
            "{'fortran_order': False, 'shape': (4, 3)}",
            "{'descr': '<f4', 'shape': (4, 3)}",
            "{}",
            "{'descr': '<f4', 'fortran_order': false, 'shape': (4, 3)}",
            "{'descr': '<f4', 'fortran_order': 0, 'shape': (4, 3)}",
            "{'descr': '<f4', 'fortran_order': Falsey, 'shape': (4, 3)}",
            "{'descr': '<f4', 'fortran_order': True_, 'shape': (4, 3)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (4)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (4 3)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (,)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (4,,3)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': 4}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': [4, 3]}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (4.0, 3)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (04, 3)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (0x4, 3)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 3}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (+4, 3)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 3)L}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (-4, 3)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (4, -3)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999999999, 3)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (18446744073709551616,)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (65536, 65536, 65536, 65536)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 1)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000, 1000000)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 3)}\x01",
            "{'descr': '<f\x7f', 'fortran_order': False, 'shape': (4, 3)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 3), }x",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 3), '': 1}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 3), 'shapes': (4, 3)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 3), 1: 2}",
        };
        for (i = 0; i < sizeof odd / sizeof *odd; i++) {
            n = bad_x(buf, 1, odd[i], sizeof xdata);
            snprintf(what, sizeof what, "header %s", odd[i]);
            npy_fail(what, buf, n, NULL, 0, MIRROR_ERR_FORMAT, 'x', NULL);
        }
        n = bad_x(buf, 1, "{'descr': '<f4', 'fortran_order': False}", sizeof xdata);
        npy_fail("no shape: the message names the key", buf, n, NULL, 0, MIRROR_ERR_FORMAT, 'x', "'shape'");
        n = bad_x(buf, 1, "{'descr': '<f4', 'shape': (4, 3)}", sizeof xdata);
        npy_fail("no fortran_order: the message names the key", buf, n, NULL, 0, MIRROR_ERR_FORMAT, 'x',
                 "'fortran_order'");
        n = bad_x(buf, 1, "{'fortran_order': False, 'shape': (4, 3)}", sizeof xdata);
        npy_fail("no descr: the message names the key", buf, n, NULL, 0, MIRROR_ERR_FORMAT, 'x', "'descr'");
        n = bad_x(buf, 3, "{'descr': '<f4', 'fortran_order': False, 'shape': (4L, 3L)}", sizeof xdata);
        npy_fail("Python 2 longs in a version 3.0 header", buf, n, NULL, 0, MIRROR_ERR_FORMAT, 'x', NULL);
        n = bad_x(buf, 1, dict_of(d, "<f4", "(-4, 3)"), sizeof xdata);
        npy_fail("a negative dimension: the message says so", buf, n, NULL, 0, MIRROR_ERR_FORMAT, 'x', "negative");
        n = bad_x(buf, 1, dict_of(d, "<f4", "(4294967296, 4294967296)"), sizeof xdata);
        npy_fail("2^64 elements: the message says it overflows", buf, n, NULL, 0, MIRROR_ERR_FORMAT, 'x',
                 "overflow");
        n = bad_x(buf, 1, dict_of(d, "<f4", "(4611686018427387904, 1)"), sizeof xdata);
        npy_fail("2^62 elements of 4 bytes: the data size overflows", buf, n, NULL, 0, MIRROR_ERR_FORMAT, 'x',
                 "overflow");
    }

    /* dtypes: unknown, big-endian, the wrong one for x or for the labels. */
    {
        static const char *const dtypes[] = {"<f8", "<f2", "|i1", "<U5", "float32", "", "|b1", "<c8",
                                             "=f4", "f4",  "<i2", "<u4", "|u2", "<O",      "|V4"};
        for (i = 0; i < sizeof dtypes / sizeof *dtypes; i++) {
            char quoted[32];
            n = bad_x(buf, 1, dict_of(d, dtypes[i], "(4, 3)"), sizeof xdata);
            snprintf(what, sizeof what, "x dtype '%s'", dtypes[i]);
            snprintf(quoted, sizeof quoted, "'%s'", dtypes[i]);
            npy_fail(what, buf, n, NULL, 0, MIRROR_ERR_UNSUPPORTED, 'x', quoted);
        }
        n = bad_x(buf, 1, dict_of(d, "<f8", "(4, 3)"), sizeof xdata);
        npy_fail("x dtype '<f8': the message lists the dtypes read", buf, n, NULL, 0, MIRROR_ERR_UNSUPPORTED, 'x',
                 "dtype '<f8' is not supported (<f4, |u1, <i4 or <i8)");
        n = bad_x(buf, 1, dict_of(d, ">f4", "(4, 3)"), sizeof xdata);
        npy_fail("big-endian x", buf, n, NULL, 0, MIRROR_ERR_UNSUPPORTED, 'x', ">f4");
        n = bad_x(buf, 1, dict_of(d, ">f4", "(4, 3)"), sizeof xdata);
        npy_fail("big-endian x: the message says big-endian", buf, n, NULL, 0, MIRROR_ERR_UNSUPPORTED, 'x',
                 "big-endian");
        n = make_npy(buf, 1, dict_of(d, ">i4", "(4,)"), ydata, sizeof ydata);
        npy_fail("big-endian labels", NULL, 0, buf, n, MIRROR_ERR_UNSUPPORTED, 'y', ">i4");
        n = bad_x(buf, 1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (4, 3)}", sizeof xdata);
        npy_fail("a structured dtype", buf, n, NULL, 0, MIRROR_ERR_UNSUPPORTED, 'x', "structured");
        n = bad_x(buf, 1, dict_of(d, "<i4", "(4, 3)"), sizeof xdata);
        npy_fail("x of <i4", buf, n, NULL, 0, MIRROR_ERR_UNSUPPORTED, 'x', "<i4");
        n = make_npy(buf, 1, dict_of(d, "<f4", "(4,)"), xdata, 16);
        /* <f4 y is float targets: the x data's NaN refuses them */
        npy_fail("<f4 y with the x data's NaN", NULL, 0, buf, n, MIRROR_ERR_FORMAT, 'y', "not finite");
        npy_fail("y given the x file", NULL, 0, gx, gx_size, MIRROR_ERR_FORMAT, 'y', "not finite");
        npy_fail("x given the y file", gy, gy_size, NULL, 0, MIRROR_ERR_UNSUPPORTED, 'x', NULL);
    }

    /* Fortran order, ranks, empty shapes. */
    n = bad_x(buf, 1, "{'descr': '<f4', 'fortran_order': True, 'shape': (4, 3), }", sizeof xdata);
    npy_fail("fortran_order True", buf, n, NULL, 0, MIRROR_ERR_UNSUPPORTED, 'x', "fortran");
    n = bad_x(buf, 1, dict_of(d, "<f4", "(1, 1, 1, 4, 3)"), sizeof xdata);
    npy_fail("5 dimensions", buf, n, NULL, 0, MIRROR_ERR_UNSUPPORTED, 'x', "5 dimensions");
    n = bad_x(buf, 1, dict_of(d, "<f4", "(1, 1, 1, 1, 1, 1, 1, 1, 4, 3)"), sizeof xdata);
    npy_fail("10 dimensions", buf, n, NULL, 0, MIRROR_ERR_UNSUPPORTED, 'x', NULL);
    n = bad_x(buf, 1, dict_of(d, "<f4", "()"), 4);
    npy_fail("x of shape ()", buf, n, NULL, 0, MIRROR_ERR_FORMAT, 'x', NULL);
    n = bad_x(buf, 1, dict_of(d, "<f4", "(12,)"), sizeof xdata);
    npy_fail("x of shape (12,)", buf, n, NULL, 0, MIRROR_ERR_FORMAT, 'x', NULL);
    n = bad_x(buf, 1, dict_of(d, "<f4", "(0, 3)"), 0);
    npy_fail("x of shape (0, 3)", buf, n, NULL, 0, MIRROR_ERR_FORMAT, 'x', "empty");
    n = bad_x(buf, 1, dict_of(d, "<f4", "(4, 0)"), 0);
    npy_fail("x of shape (4, 0)", buf, n, NULL, 0, MIRROR_ERR_FORMAT, 'x', "empty");
    n = bad_x(buf, 1, dict_of(d, "<f4", "(4, 3, 0, 5)"), 0);
    npy_fail("x of shape (4, 3, 0, 5)", buf, n, NULL, 0, MIRROR_ERR_FORMAT, 'x', "empty");
    n = make_npy(buf, 1, dict_of(d, "<i4", "(4, 1)"), ydata, sizeof ydata);
    npy_fail("labels of shape (4, 1)", NULL, 0, buf, n, MIRROR_ERR_FORMAT, 'y', NULL);
    n = make_npy(buf, 1, dict_of(d, "<i4", "()"), ydata, 4);
    npy_fail("labels of shape ()", NULL, 0, buf, n, MIRROR_ERR_FORMAT, 'y', NULL);

    /* Trailing bytes; counts that differ. */
    memcpy(buf, gx, gx_size);
    buf[gx_size] = 0;
    npy_fail("x with one trailing byte", buf, gx_size + 1, NULL, 0, MIRROR_ERR_FORMAT, 'x', "trailing");
    memset(buf + gx_size, 0, 64);
    npy_fail("x with 64 trailing bytes", buf, gx_size + 64, NULL, 0, MIRROR_ERR_FORMAT, 'x', "64 trailing");
    memcpy(buf, gy, gy_size);
    memset(buf + gy_size, 0, 4);
    npy_fail("y with 4 trailing bytes", NULL, 0, buf, gy_size + 4, MIRROR_ERR_FORMAT, 'y', "trailing");
    n = make_npy(buf, 1, dict_of(d, "<i4", "(3,)"), ydata, 12);
    npy_fail("3 labels for 4 samples", NULL, 0, buf, n, MIRROR_ERR_FORMAT, 'b', NULL);
    {
        unsigned char five[20];
        memcpy(five, ydata, 16);
        put_le32(five + 16, 1);
        n = make_npy(buf, 1, dict_of(d, "<i4", "(5,)"), five, 20);
        npy_fail("5 labels for 4 samples", NULL, 0, buf, n, MIRROR_ERR_FORMAT, 'b', NULL);
    }
}

static void test_npy_labels_and_arguments(void)
{
    unsigned char buf[1024], ys[4 * 8];
    char d[256], p[256], what[128];
    mirror_dataset ds;
    mirror_error err = {0, ""};
    long live;
    size_t i, n;
    static const int64_t bad64[] = {-1, INT64_MIN, (int64_t)INT32_MAX + 1, (int64_t)1 << 40, INT64_MAX, 65536};
    static const int32_t bad32[] = {-1, INT32_MIN, 65536, INT32_MAX};

    for (i = 0; i < sizeof bad64 / sizeof *bad64; i++) {
        put_le64(ys, 0), put_le64(ys + 8, 1), put_le64(ys + 16, (uint64_t)bad64[i]), put_le64(ys + 24, 2);
        n = make_npy(buf, 1, dict_of(d, "<i8", "(4,)"), ys, 32);
        snprintf(what, sizeof what, "<i8 label %lld", (long long)bad64[i]);
        npy_fail(what, NULL, 0, buf, n, MIRROR_ERR_LABEL, 'y', "sample 2");
    }
    put_le64(ys + 16, (uint64_t)INT32_MAX + 1);
    n = make_npy(buf, 1, dict_of(d, "<i8", "(4,)"), ys, 32);
    npy_fail("<i8 label 2^31: the message says it does not fit int32", NULL, 0, buf, n, MIRROR_ERR_LABEL, 'y',
             "int32");
    put_le64(ys + 16, (uint64_t)-5);
    n = make_npy(buf, 1, dict_of(d, "<i8", "(4,)"), ys, 32);
    npy_fail("<i8 label -5: the message says -5", NULL, 0, buf, n, MIRROR_ERR_LABEL, 'y', "label -5 ");
    for (i = 0; i < sizeof bad32 / sizeof *bad32; i++) {
        put_le32(ys, 0), put_le32(ys + 4, (uint32_t)bad32[i]), put_le32(ys + 8, 1), put_le32(ys + 12, 2);
        n = make_npy(buf, 1, dict_of(d, "<i4", "(4,)"), ys, 16);
        snprintf(what, sizeof what, "<i4 label %ld", (long)bad32[i]);
        npy_fail(what, NULL, 0, buf, n, MIRROR_ERR_LABEL, 'y', "sample 1");
    }
    put_le32(ys + 4, (uint32_t)-7);
    n = make_npy(buf, 1, dict_of(d, "<i4", "(4,)"), ys, 16);
    npy_fail("<i4 label -7: the message says -7 and negative", NULL, 0, buf, n, MIRROR_ERR_LABEL, 'y', "-7 of");
    npy_fail("<i4 label -7: negative", NULL, 0, buf, n, MIRROR_ERR_LABEL, 'y', "negative");

    /* Float targets for MSE: (n,) and (n, 2); the wrong count, rank, a NaN. */
    {
        static const float t2[8] = {0.5f, -1.0f, 2.0f, 3.5f, -0.25f, 0.0f, 1e3f, -7.0f};
        unsigned char tb[4 * 8];
        for (i = 0; i < 8; i++) {
            uint32_t bits;
            memcpy(&bits, &t2[i], 4);
            put_le32(tb + 4 * i, bits);
        }
        live = live_allocs;
        n = make_npy(buf, 1, dict_of(d, "<f4", "(4,)"), tb, 16);
        CHECK(load_pair(&ds, NULL, 0, buf, n, &err) == MIRROR_OK && ds.targets && !ds.labels && ds.target_dim == 1 &&
                  ds.num_classes == 0 && !memcmp(ds.targets, t2, 16),
              "<f4 targets (4,): target_dim 1, no labels: %s", err.message);
        mirror_dataset_free(&ds);
        n = make_npy(buf, 1, dict_of(d, "<f4", "(4, 2)"), tb, 32);
        CHECK(load_pair(&ds, NULL, 0, buf, n, &err) == MIRROR_OK && ds.targets && ds.target_dim == 2 &&
                  !memcmp(ds.targets, t2, 32),
              "<f4 targets (4, 2): target_dim 2: %s", err.message);
        {
            mirror_dataset x_only = ds;
            x_only.targets = NULL, x_only.target_dim = 0;
            CHECK(holds_good(&x_only, 0), "and x as before");
        }
        mirror_dataset_free(&ds);
        n = make_npy(buf, 1, dict_of(d, "<f4", "(2, 4)"), tb, 32);
        npy_fail("<f4 targets for 2 samples of 4", NULL, 0, buf, n, MIRROR_ERR_FORMAT, 'b', "2 targets");
        n = make_npy(buf, 1, dict_of(d, "<f4", "(4, 2, 1)"), tb, 32);
        npy_fail("<f4 targets of rank 3", NULL, 0, buf, n, MIRROR_ERR_FORMAT, 'y', "(n,) or (n, d)");
        n = make_npy(buf, 1, dict_of(d, "<f4", "(4, 0)"), tb, 0);
        npy_fail("<f4 targets (4, 0)", NULL, 0, buf, n, MIRROR_ERR_FORMAT, 'y', "d >= 1");
        put_le32(tb + 8, 0x7fc00000u);
        n = make_npy(buf, 1, dict_of(d, "<f4", "(4,)"), tb, 16);
        npy_fail("a NaN target", NULL, 0, buf, n, MIRROR_ERR_FORMAT, 'y', "target 2 is not finite");
        CHECK(live_allocs == live, "float targets: nothing leaked");
    }

    /* Missing files, a directory, NULL arguments. */
    path_in(p, "no-such.npy");
    live = live_allocs;
    memset(&ds, 0x5a, sizeof ds);
    failed("missing x file", mirror_dataset_load_npy(&ds, p, y_path, &err), &ds, &err, live, MIRROR_ERR_IO, p,
           NULL);
    memset(&ds, 0x5a, sizeof ds);
    failed("missing y file", mirror_dataset_load_npy(&ds, x_path, p, &err), &ds, &err, live, MIRROR_ERR_IO, p,
           NULL);
    path_in(p, "a-directory");
    mkdir(p, 0700);
    memset(&ds, 0x5a, sizeof ds);
    failed("a directory as x", mirror_dataset_load_npy(&ds, p, y_path, &err), &ds, &err, live, 0, NULL, NULL);
    memset(&ds, 0x5a, sizeof ds);
    failed("a directory as y", mirror_dataset_load_npy(&ds, x_path, p, &err), &ds, &err, live, 0, NULL, NULL);
    CHECK(mirror_dataset_load_npy(NULL, x_path, y_path, &err) == MIRROR_ERR_ARGUMENT && err.message[0],
          "NULL dataset is an argument error");
    memset(&ds, 0x5a, sizeof ds);
    CHECK(mirror_dataset_load_npy(&ds, NULL, y_path, NULL) == MIRROR_ERR_ARGUMENT && zeroed(&ds),
          "NULL x path is an argument error, the dataset left empty");
    CHECK(live_allocs == live, "failed loads and NULL arguments leaked nothing");
}

/* Every single-bit flip of the good x file's preamble and header: each loads
   the same shape or fails cleanly; the parser sees an exact-size copy. */
static void test_npy_bit_flips(void)
{
    unsigned char buf[1024];
    char what[96];
    size_t byte, loaded = 0, refused = 0;
    unsigned bit;
    for (byte = 0; byte < 128; byte++)
        for (bit = 0; bit < 8; bit++) {
            mirror_dataset ds;
            mirror_error err = {0, ""};
            long live = live_allocs;
            int rc;
            memcpy(buf, gx, gx_size);
            buf[byte] ^= (unsigned char)(1u << bit);
            memset(&ds, 0x5a, sizeof ds);
            rc = load_pair(&ds, buf, gx_size, NULL, 0, &err);
            snprintf(what, sizeof what, "x with bit %u of byte %zu flipped", bit, byte);
            if (rc == MIRROR_OK) {
                loaded++;
                CHECK(holds_good(&ds, 1), "%s: loads, so to the same shape and values", what);
                mirror_dataset_free(&ds);
                CHECK(live_allocs == live, "%s: freed", what);
            } else {
                refused++;
                failed(what, rc, &ds, &err, live, 0, "pair-x.npy", NULL);
            }
            {
                mirror__npy a;
                unsigned char *c = exact_copy(buf, gx_size);
                rc = mirror__parse_npy(c, gx_size, "memory", &a, &err);
                CHECK(rc < 0 || (a.ndim == 2 && a.shape[0] == 4 && a.shape[1] == 3 && a.count == 12 &&
                                 a.dtype == MIRROR__NPY_F4),
                      "%s: the parser agrees", what);
                free(c);
            }
        }
    CHECK(loaded + refused == 1024, "1024 flips (%zu loaded, %zu refused)", loaded, refused);
}

// >>bounds --------------------------------------------------------------------

#ifdef MIRROR_ZLIB
/* The bytes of a gzip file of data[n], into a new buffer; *len its size. */
static unsigned char *gz_of(const unsigned char *data, size_t n, size_t *len)
{
    char p[256];
    unsigned char *b = NULL;
    FILE *f;
    long size;
    *len = 0;
    if (!write_gz(path_in(p, "member.gz"), data, n) || !(f = fopen(p, "rb"))) return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (size = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (b = (unsigned char *)malloc((size_t)size)) != NULL && fread(b, 1, (size_t)size, f) == (size_t)size)
        *len = (size_t)size;
    fclose(f);
    return b;
}

/* A gzip file of head[n] then `count` times `chunk` zero bytes: members
   back to back, which zlib reads as one stream. Each zero member is
   compressed once, so a file that inflates to gigabytes takes a moment. */
static int write_gz_zeros(const char *path, const unsigned char *head, size_t n, size_t chunk, size_t count)
{
    unsigned char *zeros = (unsigned char *)calloc(1, chunk), *a = NULL, *b = NULL;
    size_t alen = 0, blen = 0, i;
    FILE *f = NULL;
    int ok = zeros && (!n || (a = gz_of(head, n, &alen)) != NULL) && (b = gz_of(zeros, chunk, &blen)) != NULL &&
             (f = fopen(path, "wb")) != NULL && (!n || fwrite(a, 1, alen, f) == alen);
    for (i = 0; ok && i < count; i++) ok = fwrite(b, 1, blen, f) == blen;
    if (f && fclose(f) != 0) ok = 0;
    free(zeros), free(a), free(b);
    return ok;
}
#endif

/* Files that hold, or inflate to, more than their format allows are
   refused at that bound, with a message that names the file and the
   bound: a CIFAR-10 batch holds 10000 records (30730000 bytes); a gzip
   .npy or IDX file no more than its header declares, nothing past a
   malformed header, and a .npy header is at most 1 MiB. */
static void test_bounds(void)
{
    char p[256], what[160];
    const char *paths[1];
    unsigned char *big;
    size_t n = (size_t)10001 * REC;
    mirror_dataset ds;
    mirror_error err = {0, ""};
    long live = live_allocs;
    int rc;

    /* A file's bound, to the byte: 100 bytes read, 101 refused. */
    big = (unsigned char *)calloc(1, n);
    CHECK(big != NULL, "memory for 10001 records");
    if (!big) return;
    {
        unsigned char *data = NULL;
        size_t size = 0;
        write_file(path_in(p, "hundred.bin"), big, 100);
        rc = mirror__read_bounded(p, 100, "the bound", NULL, &data, &size, &err);
        CHECK(rc == MIRROR_OK && size == 100, "a file of exactly its bound is read (%d, %zu)", rc, size);
        MIRROR_FREE(data);
        write_file(p, big, 101);
        rc = mirror__read_bounded(p, 100, "the bound", NULL, &data, &size, &err);
        CHECK(rc == MIRROR_ERR_FORMAT && !data && !size && strstr(err.message, "more than the 100 bytes the bound"),
              "one byte more is refused: %s", err.message);
    }

    /* CIFAR-10: 10001 records, plain. */
    paths[0] = path_in(p, "data_batch_big.bin");
    write_file(p, big, n);
    cifar_fail("a CIFAR-10 file of 10001 records", paths, 1, MIRROR_ERR_FORMAT, p);
    cifar_fail("a CIFAR-10 file of 10001 records: the message gives the bound", paths, 1, MIRROR_ERR_FORMAT,
               "more than the 30730000 bytes a CIFAR-10 batch holds");
    free(big);
#ifdef MIRROR_ZLIB
    /* gzip: 10000 records load; 10001, or a bomb of 256 MiB, are refused. */
    path_in(p, "data_batch_full.bin.gz");
    CHECK(write_gz_zeros(p, NULL, 0, (size_t)1000 * REC, 10), "a gzip batch of 10000 records");
    rc = mirror_dataset_load_cifar10(&ds, paths, 1, &err);
    CHECK(rc == MIRROR_OK && ds.count == 10000, "a gzip CIFAR-10 batch of 10000 records loads (%s)", err.message);
    mirror_dataset_free(&ds);
    {
        static unsigned char one[REC];
        path_in(p, "data_batch_over.bin.gz");
        CHECK(write_gz_zeros(p, one, REC, (size_t)1000 * REC, 10), "a gzip batch of 10001 records");
        cifar_fail("a gzip CIFAR-10 file of 10001 records", paths, 1, MIRROR_ERR_FORMAT,
                   "more than the 30730000 bytes a CIFAR-10 batch holds");
        path_in(p, "data_batch_bomb.bin.gz");
        CHECK(write_gz_zeros(p, NULL, 0, (size_t)1 << 20, 256), "a gzip bomb of 256 MiB");
        cifar_fail("a gzip bomb of 256 MiB as a CIFAR-10 batch", paths, 1, MIRROR_ERR_FORMAT, p);
        cifar_fail("a gzip bomb of 256 MiB as a CIFAR-10 batch: refused at the bound", paths, 1, MIRROR_ERR_FORMAT,
                   "more than the 30730000 bytes");
    }

    /* .npy: a header that declares 48 bytes of data, then 64 MiB. */
    {
        unsigned char head[1024];
        char d[256], xp[256];
        size_t hn = make_npy(head, 1, dict_of(d, "<f4", "(4, 3)"), xdata, sizeof xdata);
        path_in(xp, "bomb-x.npy.gz");
        CHECK(write_gz_zeros(xp, head, hn, (size_t)1 << 20, 64), "a .npy gzip bomb");
        memset(&ds, 0x5a, sizeof ds);
        rc = mirror_dataset_load_npy(&ds, xp, NULL, &err);
        failed("a .npy of (4, 3) float32 that inflates to 64 MiB", rc, &ds, &err, live, MIRROR_ERR_FORMAT, xp,
               "more than the 176 bytes its header declares");
        /* a header this loader refuses: reading stops there, and its message says why */
        hn = make_npy(head, 1, dict_of(d, "<c8", "(4, 3)"), xdata, sizeof xdata);
        CHECK(write_gz_zeros(xp, head, hn, (size_t)1 << 20, 64), "a .npy gzip bomb of dtype <c8");
        memset(&ds, 0x5a, sizeof ds);
        rc = mirror_dataset_load_npy(&ds, xp, NULL, &err);
        failed("a .npy gzip bomb of dtype <c8", rc, &ds, &err, live, MIRROR_ERR_UNSUPPORTED, xp, "'<c8'");
        /* an IDX bomb of another magic number: refused as such */
        memset(head, 0, 16);
        head[0] = 1, head[2] = 0x08, head[3] = 3;
        path_in(p, "bomb-idx.gz");
        CHECK(write_gz_zeros(p, head, 16, (size_t)1 << 20, 64), "an IDX gzip bomb");
        memset(&ds, 0x5a, sizeof ds);
        rc = mirror_dataset_load_idx(&ds, p, p, 10, &err);
        failed("an IDX gzip bomb of magic 01 00", rc, &ds, &err, live, MIRROR_ERR_FORMAT, p, "bad magic");
    }
#else
    (void)ds;
#endif
    /* A .npy header of 2 MiB (version 2.0, spaces after the dict). */
    {
        size_t hlen = (size_t)2 << 20, size = 12 + hlen + sizeof xdata;
        unsigned char *b = (unsigned char *)malloc(size);
        char d[256];
        CHECK(b != NULL, "memory for a 2 MiB header");
        if (b) {
            memcpy(b, "\x93NUMPY\x02\x00", 8);
            put_le32(b + 8, (uint32_t)hlen);
            memset(b + 12, ' ', hlen);
            dict_of(d, "<f4", "(4, 3)");
            memcpy(b + 12, d, strlen(d));
            b[12 + hlen - 1] = '\n';
            memcpy(b + 12 + hlen, xdata, sizeof xdata);
            snprintf(what, sizeof what, "a .npy header of %zu bytes", hlen);
            npy_fail(what, b, size, NULL, 0, MIRROR_ERR_FORMAT, 'x', "a header of 2097152 bytes");
            free(b);
        }
    }
    CHECK(live_allocs == live, "the refused loads freed everything");
}

int main(void)
{
    if (!make_root("test_loaders")) return 1;
    make_good();
    test_good_load();
    test_truncated();
    test_bad_headers();
    test_labels_and_arguments();
    test_mnist();
    test_gzip();
    test_cifar_good();
    test_cifar_hostile();
    test_npy_good();
    test_npy_truncated();
    test_npy_headers();
    test_npy_labels_and_arguments();
    test_npy_bit_flips();
    test_bounds();
    CHECK(live_allocs == 0, "every allocation was freed (%ld live)", live_allocs);
    remove_tree(root);
    return check_done("test_loaders");
}
