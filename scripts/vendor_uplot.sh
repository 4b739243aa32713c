#!/usr/bin/env bash
# Refreshes the dashboard's charting library, uPlot, vendored under
# master/assets/vendor/uplot/: its minified build, its stylesheet and its
# licence, taken from the published npm package of the pinned version
# (`npm pack`), so where the files came from can be checked by running this
# again. Not part of the build: the files are committed.
set -euo pipefail
VERSION=${1:-1.6.32}
cd "$(dirname "$0")/.."
dest=master/assets/vendor/uplot
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "uplot@$VERSION" >/dev/null && tar -xzf "uplot-$VERSION.tgz")
mkdir -p "$dest"
cp "$work/package/dist/uPlot.iife.min.js" "$dest/uPlot.iife.min.js"
cp "$work/package/dist/uPlot.min.css" "$dest/uPlot.min.css"
cp "$work/package/LICENSE" "$dest/LICENSE"
echo "$VERSION" > "$dest/VERSION"
sha256sum "$dest"/uPlot.iife.min.js "$dest"/uPlot.min.css
