#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "base/digest.h"
#include "base/hex.h"
#include "base/id.h"
#include "base/log.h"

/* Every byte as printf's "%02x" writes it: the spelling the four former
 * copies (ids, cursors, log and workspace quoting) used. */
static void every_byte_as_printf(void **state)
{
    (void)state;
    for (unsigned b = 0; b < 256; b++) {
        unsigned char in = (unsigned char)b;
        char out[3] = "", want[3];
        snprintf(want, sizeof(want), "%02x", b);
        assert_ptr_equal(sbx_hex_encode(&in, 1, out), out + 2);
        assert_memory_equal(out, want, 2);
    }
}

/* Most significant nibble first, nothing written past 2 * n. */
static void runs_without_terminator(void **state)
{
    (void)state;
    const uint8_t in[] = {0x00, 0x7f, 0x80, 0xff, 0x0a};
    char out[16];
    memset(out, '#', sizeof(out));
    char *end = sbx_hex_encode(in, sizeof(in), out);
    assert_ptr_equal(end, out + 10);
    assert_memory_equal(out, "007f80ff0a#", 11);
    assert_ptr_equal(sbx_hex_encode(in, 0, out), out);
    assert_int_equal(out[0], '0');
}

/* The users' forms stay what they were. */
static void users_unchanged(void **state)
{
    (void)state;
    const uint8_t id[16] = {0x01, 0x7f, 0x22, 0xe2, 0x79, 0xb0, 0x7c, 0xc3,
                            0x98, 0xc4, 0xdc, 0x0c, 0x0c, 0x07, 0x39, 0x8f};
    char text[SBX_ID_SIZE];
    sbx_id_format(id, text);
    assert_string_equal(text, "017f22e2-79b0-7cc3-98c4-dc0c0c07398f");
    char out[64];
    assert_string_equal(sbx_log_safe("\x01\xab z", out, sizeof(out)), "\\x01\\xab\\x20z");
    char sha[SBX_SHA256_HEX_SIZE];
    sbx_err e = {0};
    assert_int_equal(sbx_sha256_hex("abc", 3, sha, &e), 0); /* FIPS 180-2, B.1 */
    assert_string_equal(sha, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

/* HMAC-SHA256 against RFC 4231's cases 1, 2 and 6 (a key longer than the
 * block is hashed first). */
static void hmac_sha256_vectors(void **state)
{
    (void)state;
    static const struct {
        const char *key, *data, *mac;
        size_t key_len;
    } v[] = {
        {"\x0b\x0b\x0b\x0b\x0b\x0b\x0b\x0b\x0b\x0b\x0b\x0b\x0b\x0b\x0b\x0b\x0b\x0b\x0b\x0b",
         "Hi There", "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7", 20},
        {"Jefe", "what do ya want for nothing?",
         "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843", 4},
        {NULL, "Test Using Larger Than Block-Size Key - Hash Key First",
         "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54", 131},
    };
    char key131[131];
    memset(key131, 0xaa, sizeof(key131));
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        uint8_t mac[SBX_SHA256_SIZE];
        char hex[SBX_SHA256_HEX_SIZE];
        sbx_err e = {0};
        assert_int_equal(sbx_hmac_sha256(v[i].key ? v[i].key : key131, v[i].key_len, v[i].data,
                                         strlen(v[i].data), mac, &e),
                         0);
        *sbx_hex_encode(mac, sizeof(mac), hex) = '\0';
        assert_string_equal(hex, v[i].mac);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_byte_as_printf),
        cmocka_unit_test(runs_without_terminator),
        cmocka_unit_test(users_unchanged),
        cmocka_unit_test(hmac_sha256_vectors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
