#!/bin/sh
# install.sh - meson's install script (systemd/meson.build): installs m40d.ini as
# CONFIG unless a file is there already (a re-install keeps the administrator's settings,
# and says so), then, when installing onto the running system (no DESTDIR) as root under
# systemd, does what a package's postinst would: creates user m40d and group m40
# (systemd-sysusers), m40d's directories (systemd-tmpfiles --create) and reloads the
# units (systemctl daemon-reload), so that `systemctl enable --now m40d.socket` follows.
#
# Its messages show only when it fails (meson 1.0 keeps install scripts' output).
#
# Usage (meson passes): install.sh SOURCE_INI CONFIG SYSUSERS_FILE TMPFILES_FILE
set -eu

[ $# -eq 4 ] || { echo "usage: $0 SOURCE_INI CONFIG SYSUSERS_FILE TMPFILES_FILE" >&2; exit 2; }
src=$1 config=$2 sysusers=$3 tmpfiles=$4
dest=${DESTDIR:-}${config}

if [ -n "${MESON_INSTALL_DRY_RUN:-}" ]; then
        echo "Would install $src to $dest unless it exists"
        exit 0
fi
if [ -e "$dest" ]; then
        echo "Keeping $dest (not replaced by $src; compare them after an upgrade)"
else
        install -D -m 0644 "$src" "$dest"
        echo "Installing $src to $(dirname "$dest")"
fi

if [ -n "${DESTDIR:-}" ]; then
        exit 0
fi
if [ "$(id -u)" != 0 ] || [ ! -d /run/systemd/system ]; then
        echo "Not root on a running systemd: run as root systemd-sysusers $sysusers;" \
                "systemd-tmpfiles --create $tmpfiles; systemctl daemon-reload"
        exit 0
fi
systemd-sysusers "$sysusers"
systemd-tmpfiles --create "$tmpfiles"
systemctl daemon-reload
echo "Created user m40d, group m40 and m40d's directories; reloaded systemd's units"
