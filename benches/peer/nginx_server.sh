# Sourced by http_vs_wrk.sh and http_stall.sh: the nginx both serve, set up under $work.
# One process (no master), no access log, a 13-byte file: the server's cost per request is
# nginx's own. Defines nginx_cmd PORT, the shell command that starts it on 127.0.0.1:PORT
# (PORT may be quietbench's `{port}`, filled in by the agent that starts it).
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
nginx_cmd() {
  echo "sed 's/@PORT@/$1/g' $work/nginx.template > $work/nginx-$1.conf && exec nginx -p $work/ -c $work/nginx-$1.conf"
}
# start_peer_nginx PORT CPU: nginx for the peer tools, pinned, waited for; its pid in pids.
start_peer_nginx() {
  taskset -c "$2" sh -c "$(nginx_cmd "$1")" & pids+=($!)
  for _ in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && break; sleep 0.1; done
}
