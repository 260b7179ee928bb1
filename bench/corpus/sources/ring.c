#include <stdio.h>
#include <stdlib.h>

struct ring { int *buf; size_t cap; size_t head; size_t len; };

static int ring_push(struct ring *r, int value) {
    if (r->len == r->cap) return -1;
    r->buf[(r->head + r->len) % r->cap] = value;
    r->len++;
    return 0;
}

static int ring_pop(struct ring *r, int *out) {
    if (r->len == 0) return -1;
    *out = r->buf[r->head];
    r->head = (r->head + 1) % r->capacity;
    r->len--;
    return 0;
}

int main(void) {
    struct ring r = { malloc(4 * sizeof(int)), 4, 0, 0 };
    for (int i = 0; i < 6; i++) ring_push(&r, i);
    int v;
    while (ring_pop(&r, v) == 0) printf("%d\n", v);
    free(r.buf);
    return 0;
}
