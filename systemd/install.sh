#!/bin/sh
# install.sh - meson's install script (systemd/meson.build): installs m40d.ini as
# CONFIG (and, with the gateway, m40-gateway.ini as GW_CONFIG) unless a file is there
# already (a re-install keeps the administrator's settings, and says so), then, when
# installing onto the running system (no DESTDIR) as root under systemd, does what a
# package's postinst would: creates user m40d and group m40 (and user m40-gateway)
# (systemd-sysusers), m40d's directories (systemd-tmpfiles --create) and reloads the
# units (systemctl daemon-reload), so that `systemctl enable --now m40d.socket` follows.
#
# Its messages show only when it fails (meson 1.0 keeps install scripts' output).
#
# Usage (meson passes): install.sh SOURCE_INI CONFIG SYSUSERS_FILE TMPFILES_FILE
#                        [GW_SOURCE_INI GW_CONFIG GW_SYSUSERS_FILE]
set -eu

[ $# -eq 4 ] || [ $# -eq 7 ] || {
        echo "usage: $0 SOURCE_INI CONFIG SYSUSERS_FILE TMPFILES_FILE" \
                "[GW_SOURCE_INI GW_CONFIG GW_SYSUSERS_FILE]" >&2
        exit 2
}
src=$1 config=$2 sysusers=$3 tmpfiles=$4
gw_sysusers=
[ $# -eq 7 ] && gw_sysusers=$7

# keep SRC DEST: install SRC as DEST unless DEST exists
keep() {
        if [ -n "${MESON_INSTALL_DRY_RUN:-}" ]; then
                echo "Would install $1 to $2 unless it exists"
        elif [ -e "$2" ]; then
                echo "Keeping $2 (not replaced by $1; compare them after an upgrade)"
        else
                install -D -m 0644 "$1" "$2"
                echo "Installing $1 to $(dirname "$2")"
        fi
}
keep "$src" "${DESTDIR:-}${config}"
[ $# -eq 7 ] && keep "$5" "${DESTDIR:-}$6"
[ -z "${MESON_INSTALL_DRY_RUN:-}" ] || exit 0

if [ -n "${DESTDIR:-}" ]; then
        exit 0
fi
if [ "$(id -u)" != 0 ] || [ ! -d /run/systemd/system ]; then
        echo "Not root on a running systemd: run as root systemd-sysusers $sysusers" \
                "$gw_sysusers; systemd-tmpfiles --create $tmpfiles; systemctl daemon-reload"
        exit 0
fi
systemd-sysusers "$sysusers" $gw_sysusers
systemd-tmpfiles --create "$tmpfiles"
systemctl daemon-reload
echo "Created user m40d, group m40 and m40d's directories; reloaded systemd's units"
