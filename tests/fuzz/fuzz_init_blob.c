/* The fuzz targets link the daemon's core but never start a sandbox: empty
 * stand-ins for the programs and documents embedded in sandboxd (the init,
 * src/isolate/init_blob.S; claw-skill, src/skills/claw_blob.S; the OpenAPI
 * document, src/api/openapi_blob.S). */
const unsigned char sbx_init_blob[1], sbx_init_blob_end[1];
const unsigned char sbx_claw_blob[1], sbx_claw_blob_end[1];
const char sbx_openapi_json[1], sbx_openapi_json_end[1];
