// zlib, for the gzip-upload example only (the library does not use it).
#include <zlib.h>
