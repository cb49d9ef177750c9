# Sourced by the scripts: the corpora folder is $TRANSDUCE_DATA, else ../shared/data if it exists.
if [ -z "${TRANSDUCE_DATA:-}" ] && [ -d ../shared/data ]; then
  TRANSDUCE_DATA=$(cd ../shared/data && pwd)
  export TRANSDUCE_DATA
fi
