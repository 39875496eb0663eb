#!/bin/sh
# Makes docker/secrets/, the files compose.yaml mounts as secrets: random database and S3 passwords,
# an auth file with one user, admin (write role), whose password is printed once, and a read token,
# prometheus, that Prometheus sends to /metrics (metrics-token); Grafana's admin password is a file.
# Run from the repository root, after building the image (it hashes the password):
#   docker build -f docker/Dockerfile -t kafka-segment-indexer:0.1.0 . && sh docker/make-secrets.sh
set -eu
dir=docker/secrets
image=${OVERLORD_IMAGE:-kafka-segment-indexer:0.1.0}  # as in compose.yaml
if [ -e "$dir" ]; then
    echo "$dir exists: move it away to make new secrets (the database already has the old password)" >&2
    exit 1
fi
mkdir -p "$dir" && chmod 700 "$dir"  # yours alone on this host; the files must be readable by the containers' users
random() { head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \n'; }
db_password=$(random) access_key=$(random) secret_key=$(random) admin_password=$(random)
grafana_password=$(random)

printf '%s' "$db_password" > "$dir/postgres-password"
printf 'postgresql+psycopg://overlord:%s@postgres:5432/overlord' "$db_password" > "$dir/database-url"
printf '[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n' "$access_key" "$secret_key" \
    > "$dir/aws-credentials"
printf '{"identities": [{"name": "overlord", "credentials": [{"accessKey": "%s", "secretKey": "%s"}], %s}]}\n' \
    "$access_key" "$secret_key" '"actions": ["Admin", "Read", "List", "Tagging", "Write"]' > "$dir/s3-identities.json"
hash=$(printf '%s' "$admin_password" | docker run --rm -i "$image" overlord auth hash-password)
token=$(docker run --rm "$image" overlord auth new-token --json)  # {"token": "...", "tokenSha256": "..."}
printf '%s' "$token" | sed 's/.*"token": "\([^"]*\)".*/\1/' > "$dir/metrics-token"
digest=$(printf '%s' "$token" | sed 's/.*"tokenSha256": "\([0-9a-f]*\)".*/\1/')
printf '{"users": {"admin": {"role": "write", "passwordHash": "%s"}},\n "tokens": {"prometheus": {"role": "read", "tokenSha256": "%s"}}}\n' \
    "$hash" "$digest" > "$dir/overlord-auth.json"
printf '%s' "$grafana_password" > "$dir/grafana-admin-password"
chmod 644 "$dir"/*
echo "made $dir; the console and API user is admin, password $admin_password (shown once)"
