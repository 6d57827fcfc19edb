# Findxxhash: finds xxHash (Debian: libxxhash-dev) and defines the imported target
# xxhash::xxhash. Sets xxhash_FOUND, xxhash_INCLUDE_DIR, xxhash_LIBRARY.
find_path(xxhash_INCLUDE_DIR NAMES xxhash.h)
find_library(xxhash_LIBRARY NAMES xxhash)

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(xxhash REQUIRED_VARS xxhash_LIBRARY xxhash_INCLUDE_DIR)
mark_as_advanced(xxhash_INCLUDE_DIR xxhash_LIBRARY)

if(xxhash_FOUND AND NOT TARGET xxhash::xxhash)
  add_library(xxhash::xxhash UNKNOWN IMPORTED)
  set_target_properties(xxhash::xxhash PROPERTIES
    IMPORTED_LOCATION "${xxhash_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${xxhash_INCLUDE_DIR}")
endif()
