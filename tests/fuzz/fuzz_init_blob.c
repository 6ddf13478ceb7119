/* The fuzz targets link the daemon's core but never start a sandbox: an
 * empty stand-in for the embedded init program (src/isolate/init_blob.S). */
const unsigned char sbx_init_blob[1], sbx_init_blob_end[1];
