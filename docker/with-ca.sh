#!/bin/sh
# with-ca.sh CMD [ARG...]: run CMD trusting an extra CA bundle, if the build context brought one.
# Used in the builder stage only: the bundle and everything derived from it stay out of the final image.
# The extra bundle is appended to Debian's stock roots, so a bundle holding only a corporate CA works too.
set -eu
extra=/tmp/ca/ca-bundle.crt
if [ -s "$extra" ]; then
    combined=/tmp/ca/combined.pem
    cat /etc/ssl/certs/ca-certificates.crt "$extra" >"$combined"
    NODE_EXTRA_CA_CERTS="$extra"
    npm_config_cafile="$combined"
    PIP_CERT="$combined"
    SSL_CERT_FILE="$combined"
    REQUESTS_CA_BUNDLE="$combined"
    export NODE_EXTRA_CA_CERTS npm_config_cafile PIP_CERT SSL_CERT_FILE REQUESTS_CA_BUNDLE
fi
exec "$@"
