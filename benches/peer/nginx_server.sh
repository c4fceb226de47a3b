# Sourced by http_vs_wrk.sh, http_stall.sh and http2_vs_h2load.sh: the nginx they serve, set
# up under $work. One process (no master), no access log, a 13-byte file: the server's cost per
# request is nginx's own. Defines nginx_cmd PORT [http2], the shell command that starts it on
# 127.0.0.1:PORT (PORT may be quietbench's `{port}`, filled in by the agent that starts it);
# with http2, the same nginx speaking HTTP/2 over cleartext with prior knowledge (h2c: nginx
# 1.22's `listen ... http2` without ssl, which answers the HTTP/2 preface, not an Upgrade);
# with NGINX_TLS=1 set before sourcing, also tls (HTTP/1.1 over TLS) and h2tls (HTTP/2 over TLS).
mkdir -p "$work/www"
printf 'hello, world\n' > "$work/www/index.html"
cat > "$work/nginx.template" <<EOF_TEMPLATE
daemon off;
master_process off;
worker_processes 1;
error_log stderr warn;
pid $work/nginx-@PORT@.pid;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $work/body;
  proxy_temp_path $work/proxy;
  fastcgi_temp_path $work/fastcgi;
  uwsgi_temp_path $work/uwsgi;
  scgi_temp_path $work/scgi;
  server { listen 127.0.0.1:@PORT@; root $work/www; keepalive_requests 1000000; }
}
EOF_TEMPLATE
# The same server with only its listen line changed.
sed 's/listen 127.0.0.1:@PORT@;/listen 127.0.0.1:@PORT@ http2;/' "$work/nginx.template" > "$work/nginx-h2.template"
# Over TLS (a self-signed P-256 certificate made here; quietbench and the peers verify none):
# HTTP/1.1 (tls) and HTTP/2 by ALPN (h2tls).
if [ "${NGINX_TLS:-0}" = 1 ]; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -subj /CN=localhost -keyout "$work/key.pem" -out "$work/cert.pem" 2>/dev/null
  tls_lines="ssl_certificate $work/cert.pem; ssl_certificate_key $work/key.pem;"
  sed "s|listen 127.0.0.1:@PORT@;|listen 127.0.0.1:@PORT@ ssl; $tls_lines|" "$work/nginx.template" > "$work/nginx-tls.template"
  sed "s|listen 127.0.0.1:@PORT@;|listen 127.0.0.1:@PORT@ ssl http2; $tls_lines|" "$work/nginx.template" > "$work/nginx-h2tls.template"
fi
nginx_cmd() {
  local name=nginx
  case "${2:-}" in
    http2) name=nginx-h2 ;;
    tls) name=nginx-tls ;;
    h2tls) name=nginx-h2tls ;;
  esac
  echo "sed 's/@PORT@/$1/g' $work/$name.template > $work/$name-$1.conf && exec nginx -p $work/ -c $work/$name-$1.conf"
}
# start_peer_nginx PORT CPU [http2|tls|h2tls]: nginx for the peer tools, pinned, waited for; its
# pid in pids.
start_peer_nginx() {
  taskset -c "$2" sh -c "$(nginx_cmd "$1" "${3:-}")" & pids+=($!)
  for _ in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && break; sleep 0.1; done
}
