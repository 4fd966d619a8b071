#!/bin/sh
# A cqgate source in shell: the first line names the wrapper and the stream, then one CSV line
# per reading (here the load average; no event time, so each is stamped on arrival).
#   sh clients/sources/source.sh meter            # 10 readings, one a second, to 127.0.0.1:55533
#   COUNT=3 EVERY=0 PORT=55533 sh clients/sources/source.sh meter
stream=${1:?usage: source.sh STREAM}
{
    echo "csvwrapper,$stream"
    i=0
    while [ "$i" -lt "${COUNT:-10}" ]; do
        echo "$i,$(cut -d' ' -f1 /proc/loadavg)"
        i=$((i + 1))
        sleep "${EVERY:-1}"
    done
} | nc -N "${HOST:-127.0.0.1}" "${PORT:-55533}"    # -N: end the stream when the input ends
