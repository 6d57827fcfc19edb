#!/bin/sh
# No-op coverage tool (see third_party/BUILD).
exit 0
