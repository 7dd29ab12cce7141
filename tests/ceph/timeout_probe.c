/* Measures librados client timeouts (docs/ceph.md). Not part of make; build by hand:
 *   cc -O2 -o /tmp/probe tests/ceph/timeout_probe.c -lrados
 *   /tmp/probe CEPH_CONF ["shell command that hangs the cluster"] */
#include <rados/librados.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec/1e9;}
int main(int argc,char**argv){
  rados_t c; rados_ioctx_t io; int rc; double t0=now();
  if((rc=rados_create(&c,"admin"))) return printf("create %d\n",rc),1;
  rados_conf_read_file(c,argv[1]);
  const char*k[]={"client_mount_timeout","rados_mon_op_timeout","rados_osd_op_timeout"};
  for(int i=0;i<3;i++) rados_conf_set(c,k[i],"5");
  rc=rados_connect(c); printf("connect rc=%d (%s) %.2fs\n",rc,strerror(-rc),now()-t0);
  if(rc) return 1;
  if((rc=rados_ioctx_create(c,"kvfs",&io))) return printf("ioctx %d\n",rc),1;
  size_t n=8<<20; char*b=malloc(n),*r=malloc(n); for(size_t i=0;i<n;i++)b[i]=i*7;
  t0=now(); rc=rados_write_full(io,"p",b,n); printf("write rc=%d %.3fs\n",rc,now()-t0);
  t0=now(); rc=rados_read(io,"p",r,n,0); printf("read rc=%d same=%d %.3fs\n",rc,!memcmp(b,r,n),now()-t0);
  if(argc>2){ printf("hang the cluster now\n"); fflush(stdout); system(argv[2]);
    t0=now(); rc=rados_read(io,"p",r,4096,4096); printf("read while hung rc=%d (%s) %.2fs\n",rc,strerror(-rc),now()-t0);
    t0=now(); rc=rados_write_full(io,"q",b,4096); printf("write while hung rc=%d (%s) %.2fs\n",rc,strerror(-rc),now()-t0);}
  rados_ioctx_destroy(io); rados_shutdown(c); return 0;}
