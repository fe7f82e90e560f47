/* files.h - a temporary directory for the tests that write files: root is
   made by make_root and removed, with everything in it, by remove_tree. */
#ifndef FILES_H
#define FILES_H
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef MIRROR_ZLIB
#include <zlib.h>
#endif

static char root[64];

/* A fresh directory under /tmp named after the test; 0 on failure. */
static int make_root(const char *test)
{
    snprintf(root, sizeof root, "/tmp/mirror_%s_XXXXXX", test);
    if (mkdtemp(root)) return 1;
    perror("mkdtemp");
    return 0;
}

/* root/name into out (256 bytes). */
#ifdef __GNUC__
__attribute__((unused))
#endif
static const char *path_in(char *out, const char *name)
{
    snprintf(out, 256, "%s/%s", root, name);
    return out;
}

/* A new file each time: rewriting in place (truncation) makes some file
   systems flush on close, which slows the thousands of rewrites here. */
#ifdef __GNUC__
__attribute__((unused))
#endif
static int write_file(const char *path, const unsigned char *data, size_t n)
{
    FILE *f;
    int ok;
    unlink(path);
    if (!(f = fopen(path, "wb"))) return 0;
    ok = fwrite(data, 1, n, f) == n;
    return fclose(f) == 0 && ok;
}

#ifdef MIRROR_ZLIB
#ifdef __GNUC__
__attribute__((unused))
#endif
static int write_gz(const char *path, const unsigned char *data, size_t n)
{
    gzFile f = gzopen(path, "wb9");
    int ok;
    if (!f) return 0;
    ok = gzwrite(f, data, (unsigned)n) == (int)n;
    return gzclose(f) == Z_OK && ok;
}
#endif

/* Removes a directory tree (only what a test made). */
static void remove_tree(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char *sub;
    size_t size;
    struct stat st;
    if (!d) return;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        size = strlen(dir) + strlen(e->d_name) + 2; /* whatever its length: the tests make paths near PATH_MAX */
        if (!(sub = (char *)malloc(size))) continue;
        snprintf(sub, size, "%s/%s", dir, e->d_name);
        if (lstat(sub, &st) == 0 && S_ISDIR(st.st_mode))
            remove_tree(sub);
        else
            unlink(sub);
        free(sub);
    }
    closedir(d);
    rmdir(dir);
}
#endif
