# Sourced by the bench scripts that put nginx beside infergate (proxy.sh,
# ssebench/abba.sh): one definition of how nginx is set up to proxy, so
# every comparison measures the same nginx.

# nginx_conf_head TMP NOFILE prints an nginx.conf up to and inside its
# http block (state under TMP, NOFILE descriptors per worker, no access
# log, HTTP/1.1 keep-alive to the engines, no response buffering, so SSE
# is relayed event by event); the caller appends its upstreams and
# servers and the closing brace.
nginx_conf_head() {
  cat <<CONF
worker_processes auto;
worker_rlimit_nofile $2;
pid $1/nginx/nginx.pid;
error_log $1/nginx/logs/error.log warn;
daemon off;
events { worker_connections 32768; }
http {
  access_log off;
  client_body_temp_path $1/nginx/body;
  proxy_temp_path $1/nginx/proxy;
  fastcgi_temp_path $1/nginx/fastcgi;
  uwsgi_temp_path $1/nginx/uwsgi;
  scgi_temp_path $1/nginx/scgi;
  proxy_http_version 1.1;
  proxy_set_header Connection "";
  proxy_buffering off;
  proxy_read_timeout 120s;
CONF
}
