/* fuzz_rebuild.c - a model rebuilt from a checkpoint header
   (mirror_model_from_checkpoint without the file): the input is the header
   JSON; what it describes (input, layers, optimizer, schedule, precision)
   becomes a model desc and layers, each checked as a program's calls
   would be. Nothing is built: a description may ask for any size. */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mirror__header h;
    static mirror_strategy *s;
    mirror_strategy_desc sd;
    mirror_model_desc d;
    mirror_model *m = NULL;
    const char *layers = NULL;
    char *text = (char *)malloc(size + 1);
    memset(&h, 0, sizeof h);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    memset(&sd, 0, sizeof sd);
    sd.devices = "cpu:1";
    if (!s && mirror_strategy_create(&sd, &s, NULL)) s = NULL;
    memset(&d, 0, sizeof d);
    if (s && !memchr(data, '\0', size) && mirror__parse_header(text, size, &h) &&
        mirror__described_desc(&h, "fuzz", &d, &layers, NULL) == MIRROR_OK) {
        d.strategy = s;
        if (mirror_model_create(&d, &m, NULL) == MIRROR_OK) mirror__add_described(m, layers, "fuzz");
        mirror_model_destroy(m);
    }
    mirror__header_free(&h);
    free(text);
    return 0;
}
