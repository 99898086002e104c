; ptc kernel 3 fused_add_add_layer_norm_3  <- %2, %3, %4
define void @fused_add_add_layer_norm_3(i64 %begin, i64 %end, ptr noalias %args) {
entry:
  br label %loop
loop:
  %i = phi i64 [ %begin, %entry ], [ %i.next, %loop ]
  ; buf4 = add(buf3, bias)
  %v0 = call float @llvm.ptc.elem(ptr %args, i64 %i, i32 0)
  ; buf5 = add(x, buf4)
  %v1 = call float @llvm.ptc.elem(ptr %args, i64 %i, i32 1)
  ; buf6 = welford(buf5)
  %v2 = call float @llvm.ptc.elem(ptr %args, i64 %i, i32 2)
  ; buf7 = layer_norm(buf5, buf6)
  %v3 = call float @llvm.ptc.elem(ptr %args, i64 %i, i32 3)
  %i.next = add nuw i64 %i, 1
  %done = icmp eq i64 %i.next, %end
  br i1 %done, label %exit, label %loop
exit:
  ret void
}
