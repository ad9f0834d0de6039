#!/bin/sh
# Create one TSIG key per view (BIND syntax), readable by named and by the publisher.
# Usage: ./make-keys.sh [DIR]   (default /etc/bind/keys)
set -eu
dir="${1:-/etc/bind/keys}"
mkdir -p "$dir"
for view in in eu na default; do
    file="$dir/tm-$view.key"
    [ -e "$file" ] || tsig-keygen -a hmac-sha256 "tm-$view" > "$file"
    chmod 640 "$file"
done
echo "keys in $dir; give group read to bind and to the user running the publisher"
